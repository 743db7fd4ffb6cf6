#pragma once
/// \file
/// A non-owning reference to a callable: lets non-templated code (transports) call back into
/// templated code (element loops) through one indirect call per piece, without allocation.

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

}  // namespace gsync::detail
