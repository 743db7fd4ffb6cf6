#pragma once
/// \file
/// A Chrome-trace timeline of one rank, for chrome://tracing and the Perfetto UI
/// (ui.perfetto.dev): `GSYNC_TRACE=path` makes each rank write one JSON file with a span per
/// collective and per training step.
///
/// File: the JSON Array format of the Trace Event Format, one event per line,
///
///     [
///     {"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 0"}},
///     ...,
///     {"name":"allreduce","cat":"collective","ph":"X","ts":1712345678901234.567,"dur":12.345,"pid":1,"tid":1,"args":{...}}
///     ]
///
/// The Array rather than the Object format ({"traceEvents":[...],"displayTimeUnit":"ms"}) because
/// it is the one both viewers load when the closing bracket is missing (see "If the process dies");
/// nothing is lost: the Object format's "displayTimeUnit" is only a display hint, "ms" by default.
///
/// - `ts` and `dur` are microseconds; `ts` counts from the Unix epoch. Each writer reads
///   steady_clock and system_clock once, when it is created, and maps steady_clock times onto
///   system_clock with that pair, so spans are monotonic within a rank and the files of ranks on one
///   host line up (to the few microseconds between the two clock reads).
/// - `pid` is rank + 1 (pid 0 is the kernel's idle task to Perfetto, which treats it specially);
///   a `process_name` metadata event names the process "rank R" and `process_sort_index` orders
///   ranks. `tid` is a small per-thread number (1, 2, ... in the order threads first trace, shared by
///   all writers of the process); the first event of a thread in a file is preceded by a
///   `thread_name` metadata event "thread N".
///
/// Buffering: events are formatted into a memory buffer under one mutex (the user thread and a
/// communicator's engine thread both write) and written with write(2) when the buffer passes
/// 64 KiB, on `flush()`, after every instant event (they mark errors, which matter most when the
/// process dies next) and at destruction, which also writes the closing `]`. A span costs its
/// formatting, the lock and its share of the writes (benchmarks/results/from_code_comments.md).
///
/// If the process dies: the file ends with the last complete event written (every event goes out
/// whole, with the comma that separates it from the previous one written before it), so only the
/// closing `]` is missing, plus the events still in the buffer (up to 64 KiB). Both viewers accept
/// an Array-format trace without its closing bracket: chrome://tracing (catapult) appends a missing
/// `]`, and Perfetto's JSON reader accepts a truncated events array in the Array format (it reports
/// "JSON trace file is incomplete" for a truncated Object-format file). Other JSON tools need the
/// bracket: `echo ']' >> trace.3.json` makes the file valid JSON.
///
/// Path: `GSYNC_TRACE` may contain `%r` (rank), `%h` (host name) and `%p` (process id), as
/// GSYNC_DEBUG_FILE does; a path without `%r` gets `.<rank>` inserted before a `.json` extension,
/// or appended when there is none: trace.json -> trace.3.json, /tmp/t -> /tmp/t.3. Files are
/// truncated when opened. To see several ranks in one view, concatenate the (complete) files'
/// arrays, e.g. `jq -s add trace.*.json > all.json`: `pid` tells the ranks apart.

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/detail/build_mode.hpp"

namespace gsync {

namespace detail {

/// Appends `s` to `out` as the inside of a JSON string: `"` and `\` are escaped, control characters
/// become \n, \t, ... or \u00XX, valid UTF-8 is copied, and each byte that is not part of a valid
/// UTF-8 sequence becomes \ufffd (JSON text must be UTF-8).
GSYNC_DECL void json_escape_append(std::string& out, std::string_view s);

/// `s` as the inside of a JSON string (see json_escape_append).
inline std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  json_escape_append(out, s);
  return out;
}

/// The trace file of `rank` for template `tmpl` (see the file comment): `%r`/`%h`/`%p` expanded,
/// and `.<rank>` inserted before a `.json` extension (or appended) when `%r` is absent.
GSYNC_DECL std::string trace_path_for_rank(std::string_view tmpl, int rank);

/// This thread's trace track number: 1, 2, ... in the order threads first ask, process-wide.
inline int trace_thread_number() noexcept {
  static std::atomic<int> next{1};
  thread_local const int id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

/// Appends `v` in decimal.
inline void append_int(std::string& out, long long v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

/// Appends a nanosecond count as microseconds with three decimals ("12.345"); negative counts as 0.
inline void append_ns_as_us(std::string& out, long long ns) {
  if (ns < 0) ns = 0;
  append_int(out, ns / 1000);
  const int frac = static_cast<int>(ns % 1000);
  const char d[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                     static_cast<char>('0' + frac % 10)};
  out.append(d, 4);
}

}  // namespace detail

/// Chrome-trace (chrome://tracing, Perfetto) timeline of one rank; see the file comment for the
/// format. All members are safe to call from any thread.
class trace_writer {
 public:
  /// From GSYNC_TRACE: nullptr when unset or empty. `%r` rank, `%h` host name, `%p` pid in the path; a path
  /// without %r gets ".<rank>" inserted before a ".json" extension (else appended): trace.json -> trace.3.json.
  /// A file that cannot be opened: one WARN line through the rank's logger (stderr unless
  /// GSYNC_DEBUG_FILE says otherwise) and nullptr. Throws invalid_argument for a negative rank.
  GSYNC_DECL static std::shared_ptr<trace_writer> from_env(int rank);

  /// Creates (or truncates) `path` and writes the header and the process metadata of `rank`.
  /// Throws gsync::error(errc::system) if the file cannot be opened or written, and
  /// errc::invalid_argument for a negative rank.
  GSYNC_DECL trace_writer(const std::string& path, int rank);

  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;

  /// Writes the buffered events and the closing "]", and closes the file.
  GSYNC_DECL ~trace_writer();

  /// One complete span ("ph":"X") on the calling thread's track. `args_json` is either empty or the
  /// text of a JSON object written by the caller, e.g. {"seq":17,"bytes":4096}; name/category are escaped.
  /// An `end` before `start` gives a zero duration. Throws gsync::error(errc::invalid_argument) when
  /// `args_json` is not empty and not enclosed in braces.
  GSYNC_DECL void complete(std::string_view name, std::string_view category, std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end, std::string_view args_json = {});

  /// An instant event ("ph":"i", thread scope) at the current time, e.g. an error; written to the
  /// file at once. Throws like `complete` for bad `args_json`.
  GSYNC_DECL void instant(std::string_view name, std::string_view category, std::string_view args_json = {});

  /// Writes the buffered events to the file.
  GSYNC_DECL void flush();

  /// The file this writer writes.
  const std::string& path() const noexcept { return path_; }
  /// The rank whose timeline this is.
  int rank() const noexcept { return rank_; }
  /// The "pid" of this rank's events: rank + 1 (see the file comment).
  int pid() const noexcept { return rank_ + 1; }

  /// Events are written to the file when the buffer passes this many bytes.
  static constexpr std::size_t flush_bytes = 64 * 1024;

 private:
  GSYNC_DECL static void check_rank(int rank);

  GSYNC_DECL static void check_args(std::string_view args_json);

  long long to_epoch_ns(std::chrono::steady_clock::time_point t) const noexcept {
    return epoch_ns_at_steady0_ + std::chrono::duration_cast<std::chrono::nanoseconds>(t - steady0_).count();
  }

  // Separator, thread metadata on the thread's first event, and the event's name and category (m_ held).
  GSYNC_DECL void begin_event(std::string_view name, std::string_view category, int tid);

  // pid, tid, args and the closing brace (m_ held).
  GSYNC_DECL void end_event(int tid, std::string_view args_json);

  GSYNC_DECL bool write_all(const char* p, std::size_t n) noexcept;

  // Writes the buffer; on a write error, warns once and drops every later event (m_ held).
  GSYNC_DECL void flush_locked() noexcept;

  std::string path_;
  int rank_ = 0;
  int fd_ = -1;
  std::chrono::steady_clock::time_point steady0_;
  long long epoch_ns_at_steady0_ = 0;
  std::mutex m_;
  std::string buf_;                  // formatted events not yet written
  std::vector<bool> named_threads_;  // tids whose thread_name event is written
  bool failed_ = false;              // a write failed: events are dropped
};

/// RAII span for user code: `{ gsync::trace_span s(writer, "step", "train", R"({"step":3})"); ... }`
/// (writer may be nullptr: then it does nothing and costs nothing beyond a branch). The span starts
/// at construction and is written by the destructor (or by `end()`, if called first). Name,
/// category and args are copied when the writer is set, so temporaries may be passed. The writer
/// must outlive the span. Throws gsync::error(errc::invalid_argument) at construction when
/// `args_json` is not empty and not a JSON object; the destructor never throws (an event that cannot
/// be formatted is dropped).
class trace_span {
 public:
  /// Starts a span on `writer` (nothing when null).
  trace_span(trace_writer* writer, std::string_view name, std::string_view category,
             std::string_view args_json = {})
      : w_(writer) {
    if (w_ == nullptr) return;
    if (!args_json.empty() && (args_json.front() != '{' || args_json.back() != '}'))
      throw error(errc::invalid_argument, "trace_span: args_json '" + std::string(args_json.substr(0, 80)) +
                                              "' is not a JSON object (it must be empty or {...})");
    text_.reserve(name.size() + category.size() + args_json.size());
    text_.append(name).append(category).append(args_json);
    name_len_ = name.size();
    category_len_ = category.size();
    start_ = std::chrono::steady_clock::now();
  }
  /// Starts a span on the writer `writer` holds (nothing when null).
  trace_span(const std::shared_ptr<trace_writer>& writer, std::string_view name, std::string_view category,
             std::string_view args_json = {})
      : trace_span(writer.get(), name, category, args_json) {}

  trace_span(const trace_span&) = delete;
  trace_span& operator=(const trace_span&) = delete;

  /// Ends the span now, if it has not ended yet.
  ~trace_span() { end(); }

  /// Ends the span now and writes it; later calls (and the destructor) do nothing.
  void end() noexcept {
    if (w_ == nullptr) return;
    trace_writer* w = w_;
    w_ = nullptr;
    const auto stop = std::chrono::steady_clock::now();
    const std::string_view t(text_);
    try {
      w->complete(t.substr(0, name_len_), t.substr(name_len_, category_len_), start_, stop,
                  t.substr(name_len_ + category_len_));
    } catch (...) {
    }
  }

 private:
  trace_writer* w_;
  std::string text_;  // name, category and args, back to back
  std::size_t name_len_ = 0;
  std::size_t category_len_ = 0;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace gsync

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/core/trace.ipp"
#endif
