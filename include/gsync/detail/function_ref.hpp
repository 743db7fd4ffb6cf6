#pragma once
/// \file
/// A non-owning reference to a callable: lets non-templated code (transports) call back into
/// templated code (element loops) through one indirect call per piece, without allocation.

#include <memory>
#include <type_traits>
#include <utility>

namespace gsync::detail {

template <class Sig> class function_ref;

/// Non-owning callable reference. \tparam R result type. \tparam Args argument types.
template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept  // NOLINT: implicit by design, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...); }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

/// An owning, copyable callable whose copies share one target: for set-up callbacks kept in
/// structs (launch_info::share_store) without pulling <functional> into every user's file.
/// \tparam R result type. \tparam Args argument types.
template <class Sig> class shared_function;

template <class R, class... Args>
class shared_function<R(Args...)> {
 public:
  shared_function() = default;
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, shared_function> &&
             std::is_invocable_r_v<R, std::remove_cvref_t<F>&, Args...>)
  shared_function(F&& f)  // NOLINT: implicit, so that a lambda can be assigned
      : obj_(std::make_shared<std::remove_cvref_t<F>>(std::forward<F>(f))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_cvref_t<F>*>(o))(std::forward<Args>(a)...); }) {}
  /// Whether a target is set.
  explicit operator bool() const noexcept { return call_ != nullptr; }
  /// Calls the target (which must be set).
  R operator()(Args... a) const { return call_(obj_.get(), std::forward<Args>(a)...); }

 private:
  std::shared_ptr<void> obj_;
  R (*call_)(void*, Args...) = nullptr;
};

}  // namespace gsync::detail
