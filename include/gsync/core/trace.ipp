#pragma once
/// \file
/// Definitions of core/trace.hpp's out-of-line functions (the trace file writer): included by that
/// header in the header-only mode, by gsync/impl/src.hpp with GSYNC_SEPARATE_COMPILATION.

#include "gsync/core/trace.hpp"

namespace gsync {

namespace detail {

GSYNC_DECL void json_escape_append(std::string& out, std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  std::size_t plain = 0;  // start of the pending run of bytes copied unchanged
  auto cont = [&](std::size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < n && p[k] >= lo && p[k] <= hi;
  };
  while (i < n) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {  // a UTF-8 lead byte: keep a valid sequence (RFC 3629 ranges), replace otherwise
      std::size_t len = 0;
      if (c >= 0xC2 && c <= 0xDF) len = cont(i + 1) ? 2 : 0;
      else if (c == 0xE0) len = cont(i + 1, 0xA0) && cont(i + 2) ? 3 : 0;
      else if (c == 0xED) len = cont(i + 1, 0x80, 0x9F) && cont(i + 2) ? 3 : 0;  // no surrogates
      else if (c >= 0xE1 && c <= 0xEF) len = cont(i + 1) && cont(i + 2) ? 3 : 0;
      else if (c == 0xF0) len = cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
      else if (c >= 0xF1 && c <= 0xF3) len = cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
      else if (c == 0xF4) len = cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) ? 4 : 0;
      if (len != 0) {
        i += len;
        continue;
      }
    }
    out.append(s.data() + plain, i - plain);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += "\\ufffd";  // invalid UTF-8 byte
        }
    }
    plain = ++i;
  }
  out.append(s.data() + plain, n - plain);
}

GSYNC_DECL std::string trace_path_for_rank(std::string_view tmpl, int rank) {
  bool has_rank = false;
  std::string path = expand_rank_path(tmpl, std::to_string(rank), has_rank);
  if (has_rank) return path;
  const std::string suffix = "." + std::to_string(rank);
  constexpr std::string_view ext = ".json";
  const std::size_t slash = path.find_last_of('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (path.size() > base + ext.size() && std::string_view(path).substr(path.size() - ext.size()) == ext)
    path.insert(path.size() - ext.size(), suffix);
  else
    path += suffix;
  return path;
}

}  // namespace detail

GSYNC_DECL std::shared_ptr<trace_writer> trace_writer::from_env(int rank) {
  check_rank(rank);
  auto tmpl = detail::env_trace();
  if (!tmpl) return nullptr;
  const std::string path = detail::trace_path_for_rank(*tmpl, rank);
  try {
    return std::make_shared<trace_writer>(path, rank);
  } catch (const error& e) {
    logger(rank).warn(std::string("GSYNC_TRACE: ") + e.what() + "; tracing disabled");
    return nullptr;
  }
}

GSYNC_DECL trace_writer::trace_writer(const std::string& path, int rank) : path_(path), rank_(rank) {
  check_rank(rank);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw error(errc::system, "cannot open trace file " + path + ": " + std::strerror(errno));
  const auto steady0 = std::chrono::steady_clock::now();
  const auto system0 = std::chrono::system_clock::now();
  steady0_ = steady0;
  epoch_ns_at_steady0_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(system0.time_since_epoch()).count();
  buf_.reserve(flush_bytes + 4096);
  buf_ += "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
  detail::append_int(buf_, pid());
  buf_ += ",\"tid\":0,\"args\":{\"name\":\"rank ";
  detail::append_int(buf_, rank_);
  buf_ += "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":";
  detail::append_int(buf_, pid());
  buf_ += ",\"tid\":0,\"args\":{\"sort_index\":";
  detail::append_int(buf_, rank_);
  buf_ += "}}";
  if (!write_all(buf_.data(), buf_.size())) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    throw error(errc::system, "cannot write trace file " + path + ": " + why);
  }
  buf_.clear();
}

GSYNC_DECL trace_writer::~trace_writer() {
  std::lock_guard lk(m_);
  buf_ += "\n]\n";
  flush_locked();
  ::close(fd_);
}

GSYNC_DECL void trace_writer::complete(std::string_view name, std::string_view category, std::chrono::steady_clock::time_point start,
                                      std::chrono::steady_clock::time_point end, std::string_view args_json) {
  check_args(args_json);
  const int tid = detail::trace_thread_number();
  const long long ts = to_epoch_ns(start);
  const long long dur = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  std::lock_guard lk(m_);
  if (failed_) return;
  begin_event(name, category, tid);
  buf_ += "\"ph\":\"X\",\"ts\":";
  detail::append_ns_as_us(buf_, ts);
  buf_ += ",\"dur\":";
  detail::append_ns_as_us(buf_, dur);
  end_event(tid, args_json);
  if (buf_.size() >= flush_bytes) flush_locked();
}

GSYNC_DECL void trace_writer::instant(std::string_view name, std::string_view category, std::string_view args_json) {
  check_args(args_json);
  const int tid = detail::trace_thread_number();
  const long long ts = to_epoch_ns(std::chrono::steady_clock::now());
  std::lock_guard lk(m_);
  if (failed_) return;
  begin_event(name, category, tid);
  buf_ += "\"ph\":\"i\",\"s\":\"t\",\"ts\":";
  detail::append_ns_as_us(buf_, ts);
  end_event(tid, args_json);
  flush_locked();
}

GSYNC_DECL void trace_writer::flush() {
  std::lock_guard lk(m_);
  flush_locked();
}

GSYNC_DECL void trace_writer::check_rank(int rank) {
  if (rank < 0)
    throw error(errc::invalid_argument, "trace_writer: rank " + std::to_string(rank) + " is negative");
}

GSYNC_DECL void trace_writer::check_args(std::string_view args_json) {
  if (!args_json.empty() && (args_json.front() != '{' || args_json.back() != '}'))
    throw error(errc::invalid_argument, "trace_writer: args_json '" + std::string(args_json.substr(0, 80)) +
                                            "' is not a JSON object (it must be empty or {...})");
}

GSYNC_DECL void trace_writer::begin_event(std::string_view name, std::string_view category, int tid) {
  const auto t = static_cast<std::size_t>(tid);
  if (t >= named_threads_.size()) named_threads_.resize(t + 1, false);
  if (!named_threads_[t]) {
    named_threads_[t] = true;
    buf_ += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":";
    detail::append_int(buf_, pid());
    buf_ += ",\"tid\":";
    detail::append_int(buf_, tid);
    buf_ += ",\"args\":{\"name\":\"thread ";
    detail::append_int(buf_, tid);
    buf_ += "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":";
    detail::append_int(buf_, pid());
    buf_ += ",\"tid\":";
    detail::append_int(buf_, tid);
    buf_ += ",\"args\":{\"sort_index\":";
    detail::append_int(buf_, tid);
    buf_ += "}}";
  }
  buf_ += ",\n{\"name\":\"";
  detail::json_escape_append(buf_, name);
  buf_ += "\",\"cat\":\"";
  detail::json_escape_append(buf_, category);
  buf_ += "\",";
}

GSYNC_DECL void trace_writer::end_event(int tid, std::string_view args_json) {
  buf_ += ",\"pid\":";
  detail::append_int(buf_, pid());
  buf_ += ",\"tid\":";
  detail::append_int(buf_, tid);
  if (!args_json.empty()) {
    buf_ += ",\"args\":";
    buf_ += args_json;
  }
  buf_ += '}';
}

GSYNC_DECL bool trace_writer::write_all(const char* p, std::size_t n) noexcept {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

GSYNC_DECL void trace_writer::flush_locked() noexcept {
  if (buf_.empty()) return;
  if (!failed_ && !write_all(buf_.data(), buf_.size())) {
    failed_ = true;
    try {
      logger(rank_).warn("cannot write trace file " + path_ + ": " + std::strerror(errno) +
                         "; the rest of this rank's trace is dropped");
    } catch (...) {
    }
  }
  buf_.clear();
}

}  // namespace gsync
