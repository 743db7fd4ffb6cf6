// Observability building blocks: per-communicator operation counters (core/counters.hpp) and the
// Chrome-trace writer (core/trace.hpp). The trace files written here are read back with a small
// strict JSON parser (below) and, when python3 is installed, also with Python's json module.

#include <doctest/doctest.h>

#include <gsync/core/counters.hpp>
#include <gsync/core/trace.hpp>
#include <gsync/core/tick_clock.hpp>

#include "support/env.hpp"
#include "support/world.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

// ---- A strict JSON reader (RFC 8259) for checking trace files -----------------------------------

struct json_value;
using json_object = std::map<std::string, json_value>;
using json_array = std::vector<json_value>;
struct json_number {
  std::string text;  // as written, so that large timestamps can be read exactly
};
struct json_value {
  std::variant<std::nullptr_t, bool, json_number, std::string, json_array, json_object> v;
  const json_object& obj() const { return std::get<json_object>(v); }
  const json_array& arr() const { return std::get<json_array>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const std::string& num() const { return std::get<json_number>(v).text; }
  bool is_obj() const { return std::holds_alternative<json_object>(v); }
};

class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}

  // The document, or nothing (with error()) when it is not exactly one valid JSON value.
  std::optional<json_value> parse() {
    auto v = value();
    ws();
    if (v && i_ != s_.size()) return fail("trailing characters");
    return v;
  }
  const std::string& error() const { return err_; }

 private:
  std::optional<json_value> fail(const std::string& why) {
    if (err_.empty()) err_ = why + " at offset " + std::to_string(i_);
    return std::nullopt;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool lit(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::optional<json_value> value() {
    ws();
    if (i_ >= s_.size()) return fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') {
      auto s = string();
      if (!s) return std::nullopt;
      return json_value{*s};
    }
    if (lit("true")) return json_value{true};
    if (lit("false")) return json_value{false};
    if (lit("null")) return json_value{nullptr};
    return number();
  }
  std::optional<json_value> number() {
    const std::size_t b = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d;
    };
    const std::size_t int_start = i_;
    const std::size_t nint = digits();
    if (nint == 0) return fail("bad value");
    if (nint > 1 && s_[int_start] == '0') return fail("leading zero");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) return fail("bad fraction");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) return fail("bad exponent");
    }
    return json_value{json_number{std::string(s_.substr(b, i_ - b))}};
  }
  static void put_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::optional<std::uint32_t> hex4() {
    if (i_ + 4 > s_.size()) return std::nullopt;
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<std::uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<std::uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<std::uint32_t>(h - 'A' + 10);
      else return std::nullopt;
    }
    return v;
  }
  std::optional<std::string> string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) {
        fail("unterminated string");
        return std::nullopt;
      }
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) {
        fail("raw control character in string");
        return std::nullopt;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          auto cp = hex4();
          if (!cp) break;
          if (*cp >= 0xD800 && *cp <= 0xDBFF) {  // surrogate pair
            if (!lit("\\u")) break;
            auto lo = hex4();
            if (!lo || *lo < 0xDC00 || *lo > 0xDFFF) break;
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*lo - 0xDC00);
          } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
            break;
          }
          put_utf8(out, *cp);
          continue;
        }
        default: break;
      }
      if (e == 'u') {
        fail("bad \\u escape");
        return std::nullopt;
      }
      if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        fail("bad escape");
        return std::nullopt;
      }
    }
    fail("bad escape at end");
    return std::nullopt;
  }
  std::optional<json_value> array() {
    ++i_;
    json_array a;
    ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return json_value{std::move(a)};
    }
    while (true) {
      auto v = value();
      if (!v) return std::nullopt;
      a.push_back(std::move(*v));
      ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return json_value{std::move(a)};
      }
      return fail("expected , or ] in array");
    }
  }
  std::optional<json_value> object() {
    ++i_;
    json_object o;
    ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return json_value{std::move(o)};
    }
    while (true) {
      ws();
      if (i_ >= s_.size() || s_[i_] != '"') return fail("expected key");
      auto k = string();
      if (!k) return std::nullopt;
      ws();
      if (i_ >= s_.size() || s_[i_] != ':') return fail("expected :");
      ++i_;
      auto v = value();
      if (!v) return std::nullopt;
      if (!o.emplace(*k, std::move(*v)).second) return fail("duplicate key " + *k);
      ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return json_value{std::move(o)};
      }
      return fail("expected , or } in object");
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string err_;
};

std::optional<json_value> parse_json(std::string_view s, bool expect_valid = true) {
  json_reader r(s);
  auto v = r.parse();
  if (!v && expect_valid) MESSAGE("JSON error: " << r.error());
  return v;
}

// "1712345678901234.567" (microseconds, three decimals as the writer prints them) -> nanoseconds.
long long us_text_to_ns(const std::string& t) {
  const auto dot = t.find('.');
  REQUIRE(dot != std::string::npos);
  REQUIRE(t.size() == dot + 4);
  return std::stoll(t.substr(0, dot)) * 1000 + std::stoll(t.substr(dot + 1));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::size_t count_of(std::string_view hay, std::string_view needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

bool python_available() {
  static const bool ok = std::system("command -v python3 >/dev/null 2>&1") == 0;
  return ok;
}

// Python's json module agrees that `path` holds one valid JSON document (true when python3 is absent).
bool python_parses(const std::string& path) {
  if (!python_available()) return true;
  const std::string cmd = "python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding=\"utf-8\"))' '" + path + "'";
  return std::system(cmd.c_str()) == 0;
}

// A fresh directory under /tmp, removed at scope exit.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/gsync_obs_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

using gsync_test::scoped_env;

}  // namespace

// ---- counters -------------------------------------------------------------------------------------

TEST_CASE("format_bytes: bytes below 1 KiB exactly, larger sizes with three significant digits") {
  using gsync::detail::format_bytes;
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(100 * 1024) == "100 KiB");
  CHECK(format_bytes(64ull << 20) == "64.0 MiB");
  CHECK(format_bytes((1ull << 20) - 1) == "1.00 MiB");  // 1023.999 KiB rounds up into the next unit
  CHECK(format_bytes(3ull << 30) == "3.00 GiB");
  CHECK(format_bytes(5ull << 40) == "5.00 TiB");
  CHECK(format_bytes(UINT64_MAX) == "16.0 EiB");
}

TEST_CASE("op_counters: record, get, total, snapshot, reset") {
  gsync::op_counters c;
  CHECK(c.get("allreduce") == gsync::op_totals{});
  CHECK(c.snapshot().empty());
  CHECK(c.total() == gsync::op_totals{});

  c.record("allreduce", 4096, 0.002);
  c.record("allreduce", 1024, 0.010);
  c.record("broadcast", 100, 0.001, true);
  c.record("allreduce", 0, 0.004, true);
  c.record("alltoall", 7, 0.0);

  const auto ar = c.get("allreduce");
  CHECK(ar.calls == 3);
  CHECK(ar.bytes == 5120);
  CHECK(ar.seconds == doctest::Approx(0.016));
  CHECK(ar.max_seconds == 0.010);
  CHECK(ar.failures == 1);
  CHECK(ar.mean_seconds() == doctest::Approx(0.016 / 3));
  CHECK(c.get("broadcast").failures == 1);
  CHECK(c.get("allgather") == gsync::op_totals{});
  CHECK(c.get("allreduc") == gsync::op_totals{});  // a prefix is another kind

  const auto snap = c.snapshot();
  REQUIRE(snap.size() == 3);
  CHECK(snap[0].first == "allreduce");  // sorted by kind
  CHECK(snap[1].first == "alltoall");
  CHECK(snap[2].first == "broadcast");
  CHECK(snap[0].second == ar);
  CHECK(snap[1].second.calls == 1);
  CHECK(snap[1].second.bytes == 7);

  const auto t = c.total();
  CHECK(t.calls == 5);
  CHECK(t.bytes == 5120 + 100 + 7);
  CHECK(t.seconds == doctest::Approx(0.017));
  CHECK(t.max_seconds == 0.010);
  CHECK(t.failures == 2);

  gsync::op_counters copy = c;
  CHECK(copy.snapshot() == snap);

  c.reset();
  CHECK(c.snapshot().empty());
  CHECK(c.get("allreduce") == gsync::op_totals{});
  CHECK(copy.get("allreduce") == ar);  // the copy is independent
}

TEST_CASE("op_counters: one buffer reused for different kinds, kinds inserted before the last one") {
  // record remembers where the last kind sat: the same characters' address with other contents,
  // and entries shifted by an insertion in front, must still land on the right kinds.
  gsync::op_counters c;
  std::string k = "send";
  c.record(k, 1, 0.0);
  k = "recv";  // same buffer (short-string storage), another kind
  c.record(k, 2, 0.0);
  c.record("allreduce", 4, 0.0);  // inserted before both
  c.record("allreduce", 8, 0.0);
  k = "send";
  c.record(k, 16, 0.0);
  c.record("barrier", 32, 0.0);
  c.record("send", 64, 0.0);
  CHECK(c.get("send").bytes == 81);
  CHECK(c.get("send").calls == 3);
  CHECK(c.get("recv").bytes == 2);
  CHECK(c.get("allreduce").bytes == 12);
  CHECK(c.get("barrier").bytes == 32);
  CHECK(c.snapshot().size() == 4);
  c.reset();
  c.record("send", 1, 0.0);
  CHECK(c.get("send").calls == 1);
  CHECK(c.snapshot().size() == 1);
}

TEST_CASE("op_counters: record_static finds kinds by address, and by name the first time") {
  gsync::op_counters c;
  static const char send_a[] = "send";
  static const char send_b[] = "send";  // another address, the same kind
  static const char recv[] = "recv";
  c.record_static(send_a, 1, 0.0);
  c.record_static(recv, 2, 0.0);
  c.record_static(send_b, 4, 0.0);
  c.record("send", 8, 0.0);  // by name: the same entry
  c.record_static(send_a, 16, 0.001, true);
  CHECK(c.get("send").calls == 4);
  CHECK(c.get("send").bytes == 29);
  CHECK(c.get("send").failures == 1);
  CHECK(c.get("recv").bytes == 2);
  // More kinds than the address cache holds still land on their own entries.
  static const char names[20][8] = {"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09",
                                    "k10", "k11", "k12", "k13", "k14", "k15", "k16", "k17", "k18", "k19"};
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 20; ++i) c.record_static(names[i], static_cast<std::uint64_t>(i), 0.0);
  for (int i = 0; i < 20; ++i) {
    CHECK(c.get(names[i]).calls == 3);
    CHECK(c.get(names[i]).bytes == 3u * static_cast<std::uint64_t>(i));
  }
  CHECK(c.snapshot().size() == 22);
  CHECK(c.snapshot().front().first == "k00");  // sorted by kind
  CHECK(c.snapshot().back().first == "send");
  // reset forgets the addresses with the kinds; a copy starts from the names.
  c.reset();
  c.record_static(recv, 1, 0.0);
  c.record_static(send_a, 1, 0.0);
  CHECK(c.get("recv").calls == 1);
  CHECK(c.get("send").calls == 1);
  gsync::op_counters copy = c;
  copy.record_static(send_b, 2, 0.0);
  CHECK(copy.get("send").calls == 2);
  CHECK(c.get("send").calls == 1);
  copy = gsync::op_counters{};
  copy.record_static(send_a, 2, 0.0);
  CHECK(copy.snapshot().size() == 1);
  CHECK(copy.get("send").bytes == 2);
  CHECK_THROWS_AS(c.record_static(nullptr, 1, 0.0), gsync::error);
  CHECK_THROWS_AS(c.record_static("", 1, 0.0), gsync::error);
  CHECK_THROWS_AS(c.record_static(send_a, 1, -1.0), gsync::error);
}

TEST_CASE("tick_clock: readings never go backwards and match steady_clock (rate measured, base re-read)") {
  // 60 ms of readings: the first 2 ms come from steady_clock, then from the time-stamp counter
  // (where the kernel's clock source is "tsc"), across several ~10 ms re-bases. Each reading must
  // fall between steady_clock readings taken just before and just after it (2 ms of slack for the
  // conversion: its error is microseconds), and a thread's readings must never decrease.
  auto check_thread = [] {
    std::string err;
    auto prev = gsync::detail::tick_clock::now();
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
    long n = 0;
    for (;;) {
      const auto before = std::chrono::steady_clock::now();
      if (before >= end) break;
      const auto t = gsync::detail::tick_clock::now();
      const auto after = std::chrono::steady_clock::now();
      ++n;
      if (t < prev) err = "reading " + std::to_string(n) + " went backwards";
      if (t < before - std::chrono::milliseconds(2) || t > after + std::chrono::milliseconds(2))
        err = "reading " + std::to_string(n) + " is " +
              std::to_string(std::chrono::duration<double, std::micro>(t - before).count()) + " us from steady_clock";
      if (!err.empty()) break;
      prev = t;
    }
    return err;
  };
  std::string e1, e2;
  std::thread other([&] { e2 = check_thread(); });
  e1 = check_thread();
  other.join();
  CHECK_MESSAGE(e1.empty(), e1);
  CHECK_MESSAGE(e2.empty(), e2);
}

TEST_CASE("op_counters: bad arguments are rejected with invalid_argument") {
  gsync::op_counters c;
  auto expect_invalid = [](auto&& f) {
    try {
      f();
      FAIL("no exception");
    } catch (const gsync::error& e) {
      CHECK(e.code() == gsync::errc::invalid_argument);
    }
  };
  expect_invalid([&] { c.record("", 1, 0.1); });
  expect_invalid([&] { c.record("send", 1, -0.5); });
  expect_invalid([&] { c.record("send", 1, std::nan("")); });
  CHECK(c.snapshot().empty());
}

TEST_CASE("op_counters: report lists every kind with units and a total row") {
  gsync::op_counters c;
  CHECK(c.report() == "no operations recorded\n");
  c.record("allreduce", 64ull << 20, 0.5);
  c.record("allreduce", 64ull << 20, 1.5);
  c.record("send", 512, 0.000250, true);
  const std::string r = c.report();
  INFO(r);
  std::vector<std::string> lines;
  std::istringstream in(r);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 4);  // header, allreduce, send, total
  for (const char* col : {"kind", "calls", "bytes", "total s", "mean us", "max us", "failures"})
    CHECK(lines[0].find(col) != std::string::npos);
  auto fields = [](const std::string& l) {
    std::vector<std::string> f;
    std::istringstream s(l);
    for (std::string w; s >> w;) f.push_back(w);
    return f;
  };
  // kind calls bytes unit total_s mean_us max_us failures
  const auto a = fields(lines[1]);
  REQUIRE(a.size() == 8);
  CHECK(a[0] == "allreduce");
  CHECK(a[1] == "2");
  CHECK(a[2] + " " + a[3] == "128 MiB");
  CHECK(std::stod(a[4]) == doctest::Approx(2.0));
  CHECK(std::stod(a[5]) == doctest::Approx(1e6));
  CHECK(std::stod(a[6]) == doctest::Approx(1.5e6));
  CHECK(a[7] == "0");
  const auto s = fields(lines[2]);
  REQUIRE(s.size() == 8);
  CHECK(s[0] == "send");
  CHECK(s[2] + " " + s[3] == "512 B");
  CHECK(std::stod(s[5]) == doctest::Approx(250.0));
  CHECK(s[7] == "1");
  const auto t = fields(lines[3]);
  REQUIRE(t.size() == 8);
  CHECK(t[0] == "total");
  CHECK(t[1] == "3");
  CHECK(t[2] + " " + t[3] == "128 MiB");
  CHECK(std::stod(t[6]) == doctest::Approx(1.5e6));
  CHECK(t[7] == "1");
}

TEST_CASE("op_counters: concurrent records from 4 threads add up exactly") {
  gsync::op_counters c;
  constexpr int threads = 4, per_thread = 20000;
  const char* kinds[] = {"allreduce", "broadcast", "send", "recv", "barrier"};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Seconds are multiples of 2^-10, so their sums are exact in double precision.
        c.record(kinds[(t + i) % 5], static_cast<std::uint64_t>(t * 1000 + i % 97), (i % 8) / 1024.0, i % 13 == 0);
        if (i % 1000 == 0) (void)c.total();  // readers interleave with the writers
      }
    });
  for (auto& t : ts) t.join();
  // Expected totals, computed serially.
  std::map<std::string, gsync::op_totals> want;
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < per_thread; ++i) {
      auto& w = want[kinds[(t + i) % 5]];
      ++w.calls;
      w.bytes += static_cast<std::uint64_t>(t * 1000 + i % 97);
      w.seconds += (i % 8) / 1024.0;
      w.max_seconds = std::max(w.max_seconds, (i % 8) / 1024.0);
      w.failures += i % 13 == 0;
    }
  const auto snap = c.snapshot();
  REQUIRE(snap.size() == want.size());
  for (const auto& kt : snap) {
    INFO(kt.first);
    CHECK(kt.second == want.at(kt.first));
  }
  CHECK(c.total().calls == std::uint64_t{threads} * per_thread);
}

// ---- JSON escaping and paths ----------------------------------------------------------------------

TEST_CASE("json_escape: quotes, backslashes, control characters, UTF-8 kept, invalid bytes replaced") {
  using gsync::detail::json_escape;
  CHECK(json_escape("") == "");
  CHECK(json_escape("allreduce") == "allreduce");
  CHECK(json_escape("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(json_escape("l1\nl2\r\t\b\f") == "l1\\nl2\\r\\t\\b\\f");
  CHECK(json_escape(std::string("\x01\x1f\x7f", 3)) == "\\u0001\\u001f\x7f");
  CHECK(json_escape(std::string("a\0b", 3)) == "a\\u0000b");
  CHECK(json_escape("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  CHECK(json_escape("\xFF") == "\\ufffd");
  CHECK(json_escape("x\x80y") == "x\\ufffdy");                        // lone continuation byte
  CHECK(json_escape("\xE2\x82") == "\\ufffd\\ufffd");                 // truncated sequence
  CHECK(json_escape("\xC0\xAF") == "\\ufffd\\ufffd");                 // overlong
  CHECK(json_escape("\xED\xA0\x80") == "\\ufffd\\ufffd\\ufffd");      // UTF-16 surrogate
  CHECK(json_escape("\xF4\x90\x80\x80") == "\\ufffd\\ufffd\\ufffd\\ufffd");  // above U+10FFFF
  // Every escaped byte string reads back as a JSON string (invalid bytes as U+FFFD).
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  auto v = parse_json("\"" + json_escape(all) + "\"");
  REQUIRE(v);
  CHECK(v->str().substr(0, 128) == all.substr(0, 128));
}

TEST_CASE("trace path: %r, %p, %h expanded, .<rank> inserted before .json or appended") {
  using gsync::detail::trace_path_for_rank;
  CHECK(trace_path_for_rank("trace.json", 3) == "trace.3.json");
  CHECK(trace_path_for_rank("/tmp/run/trace.json", 0) == "/tmp/run/trace.0.json");
  CHECK(trace_path_for_rank("/tmp/run/trace", 12) == "/tmp/run/trace.12");
  CHECK(trace_path_for_rank("/tmp/run/trace.txt", 1) == "/tmp/run/trace.txt.1");
  CHECK(trace_path_for_rank("/tmp/x.json/t", 2) == "/tmp/x.json/t.2");
  CHECK(trace_path_for_rank("/tmp/.json", 2) == "/tmp/.json.2");
  CHECK(trace_path_for_rank("/tmp/t_%r.json", 7) == "/tmp/t_7.json");
  CHECK(trace_path_for_rank("/tmp/%r/%r.json", 5) == "/tmp/5/5.json");
  CHECK(trace_path_for_rank("/tmp/t_%p_%r", 1) == "/tmp/t_" + std::to_string(::getpid()) + "_1");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  CHECK(trace_path_for_rank("/tmp/%h.json", 4) == std::string("/tmp/") + host + ".4.json");
  CHECK(trace_path_for_rank("/tmp/a%xb%", 0) == "/tmp/a%xb%.0");
}

// ---- trace writer ---------------------------------------------------------------------------------

TEST_CASE("trace_writer: spans from several threads make one valid Chrome-trace JSON file") {
  temp_dir dir;
  const std::string path = dir.path + "/trace.3.json";
  constexpr int threads = 4, spans = 300;
  const std::string odd_name = "we\"ird\\name\n\t\x01 caf\xC3\xA9";
  const auto before = std::chrono::system_clock::now();
  {
    auto w = std::make_shared<gsync::trace_writer>(path, 3);
    CHECK(w->path() == path);
    CHECK(w->pid() == 4);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < spans; ++i) {
          const auto a = std::chrono::steady_clock::now();
          const auto b = a + std::chrono::microseconds(i);
          const std::string args = "{\"seq\":" + std::to_string(i) + ",\"thread\":" + std::to_string(t) + "}";
          w->complete(i % 2 ? "allreduce" : "broadcast", "collective", a, b, args);
        }
      });
    for (auto& t : ts) t.join();
    // Nested RAII spans on this thread; the outer one contains the inner one.
    {
      gsync::trace_span outer(w, "step", "train", R"({"step":3})");
      gsync::trace_span inner(w.get(), odd_name, "c\"at");
    }
    w->complete("no_args", "x", std::chrono::steady_clock::now(), std::chrono::steady_clock::now());
    w->instant("error", "failure", R"({"what":"peer lost"})");
  }
  const auto after = std::chrono::system_clock::now();

  const std::string text = read_file(path);
  CHECK(text.rfind("[\n{", 0) == 0);
  CHECK(text.size() > 30);
  CHECK(text.substr(text.size() - 4) == "}\n]\n");
  CHECK(count_of(text, "\"ph\":\"X\"") == threads * spans + 3);
  CHECK(count_of(text, "\"ph\":\"i\"") == 1);
  CHECK(count_of(text, "\"name\":\"thread_name\"") == threads + 1);
  CHECK(text.find("we\\\"ird\\\\name\\n\\t\\u0001 caf\xC3\xA9") != std::string::npos);
  CHECK(python_parses(path));

  auto doc = parse_json(text);
  REQUIRE(doc);
  REQUIRE(!doc->is_obj());
  const auto& ev = doc->arr();

  const long long lo_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(before.time_since_epoch()).count();
  const long long hi_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(after.time_since_epoch()).count();
  std::map<std::string, int> names;
  std::map<std::string, long long> last_ts_by_tid;
  std::set<std::string> named_tids, used_tids;
  std::map<std::string, std::pair<long long, long long>> span_by_name;  // name -> (ts, dur) in ns
  bool process_named = false;
  for (const auto& e : ev) {
    const auto& o = e.obj();
    CHECK(o.at("pid").num() == "4");
    const std::string ph = o.at("ph").str();
    const std::string tid = o.at("tid").num();
    if (ph == "M") {
      const std::string n = o.at("name").str();
      if (n == "process_name") {
        CHECK(o.at("args").obj().at("name").str() == "rank 3");
        process_named = true;
      }
      if (n == "thread_name") {
        CHECK(o.at("args").obj().at("name").str() == "thread " + tid);
        CHECK(used_tids.count(tid) == 0);  // named before its first event
        named_tids.insert(tid);
      }
      continue;
    }
    used_tids.insert(tid);
    CHECK(named_tids.count(tid) == 1);
    CHECK(o.count("ts") == 1);
    const long long ts = us_text_to_ns(o.at("ts").num());
    // Microseconds since the Unix epoch (not since boot, as steady_clock counts here), between
    // `before` and `after`; a minute of slack keeps a clock adjustment during the test harmless.
    CHECK(ts >= lo_ns - 60'000'000'000LL);
    CHECK(ts <= hi_ns + 60'000'000'000LL);
    ++names[o.at("name").str()];
    if (ph == "X") {
      const long long dur = us_text_to_ns(o.at("dur").num());
      CHECK(dur >= 0);
      span_by_name[o.at("name").str()] = {ts, dur};
      if (o.at("cat").str() == "collective") {
        const auto& args = o.at("args").obj();
        const int seq = std::stoi(args.at("seq").num());
        CHECK(dur == seq * 1000LL);  // end - start exactly as passed
        CHECK(o.at("name").str() == (seq % 2 ? "allreduce" : "broadcast"));
        // Spans of one thread appear in the order that thread wrote them.
        auto [it, fresh] = last_ts_by_tid.emplace(tid, ts);
        if (!fresh) {
          CHECK(ts >= it->second);
          it->second = ts;
        }
      }
    } else {
      CHECK(ph == "i");
      CHECK(o.at("s").str() == "t");
      CHECK(o.at("args").obj().at("what").str() == "peer lost");
    }
  }
  CHECK(process_named);
  CHECK(names["allreduce"] == threads * spans / 2);
  CHECK(names["broadcast"] == threads * spans / 2);
  CHECK(names["step"] == 1);
  CHECK(names[odd_name] == 1);
  CHECK(names["no_args"] == 1);
  CHECK(names["error"] == 1);
  CHECK(used_tids.size() == threads + 1);
  const auto [ots, odur] = span_by_name.at("step");
  const auto [its, idur] = span_by_name.at(odd_name);
  CHECK(ots <= its);
  CHECK(its + idur <= ots + odur);
  for (const auto& e : ev)
    if (e.obj().at("ph").str() != "M" && e.obj().at("name").str() == odd_name)
      CHECK(e.obj().at("cat").str() == "c\"at");
}

TEST_CASE("trace_writer: a file cut off before the destructor still holds every flushed event") {
  temp_dir dir;
  const std::string path = dir.path + "/cut.json";
  gsync::trace_writer w(path, 0);
  CHECK(w.pid() == 1);
  const auto t0 = std::chrono::steady_clock::now();
  // Enough events to pass the 64 KiB flush threshold at least once without an explicit flush.
  int n = 0;
  while (read_file(path).size() < gsync::trace_writer::flush_bytes) {
    REQUIRE(n < 100000);
    w.complete("span", "cat", t0, t0 + std::chrono::nanoseconds(n), R"({"n":1})");
    ++n;
  }
  const std::string auto_flushed = read_file(path);
  CHECK(auto_flushed.back() == '}');  // written in whole events
  w.complete("last", "cat", t0, t0);
  w.flush();
  // What a process that dies now leaves behind: no closing "]", otherwise complete.
  const std::string cut = read_file(path);
  CHECK(cut.rfind("[\n{", 0) == 0);
  CHECK(cut.back() == '}');
  CHECK(count_of(cut, "\"ph\":\"X\"") == static_cast<std::size_t>(n) + 1);
  CHECK(!parse_json(cut, false).has_value());
  // Appending the closing bracket (what chrome://tracing does, and the repair the file comment
  // documents for other tools) makes it valid JSON.
  auto doc = parse_json(cut + "]");
  REQUIRE(doc);
  CHECK(doc->arr().size() == static_cast<std::size_t>(n) + 1 + 4);  // + process and thread metadata, 2 each
  {
    std::ofstream(dir.path + "/repaired.json") << cut << "\n]";
  }
  CHECK(python_parses(dir.path + "/repaired.json"));
}

TEST_CASE("trace_writer: an instant event reaches the file at once") {
  temp_dir dir;
  const std::string path = dir.path + "/i.json";
  gsync::trace_writer w(path, 2);
  w.complete("before", "c", std::chrono::steady_clock::now(), std::chrono::steady_clock::now());
  CHECK(read_file(path).find("\"before\"") == std::string::npos);  // still buffered
  w.instant("peer_lost", "error", R"({"peer":1})");
  const std::string t = read_file(path);
  CHECK(t.find("\"before\"") != std::string::npos);
  CHECK(t.find("\"name\":\"peer_lost\",\"cat\":\"error\",\"ph\":\"i\"") != std::string::npos);
}

TEST_CASE("trace_writer: bad arguments and unopenable files") {
  temp_dir dir;
  try {
    gsync::trace_writer w(dir.path + "/missing/dir/t.json", 0);
    FAIL("no exception");
  } catch (const gsync::error& e) {
    CHECK(e.code() == gsync::errc::system);
    CHECK(std::string(e.what()).find("missing/dir/t.json") != std::string::npos);
  }
  CHECK_THROWS_AS(gsync::trace_writer(dir.path + "/neg.json", -1), gsync::error);
  gsync::trace_writer w(dir.path + "/ok.json", 1);
  for (const char* bad : {"seq:1", "[1,2]", "{\"a\":1", "\"x\""}) {
    INFO(bad);
    try {
      w.complete("n", "c", std::chrono::steady_clock::now(), std::chrono::steady_clock::now(), bad);
      FAIL("no exception");
    } catch (const gsync::error& e) {
      CHECK(e.code() == gsync::errc::invalid_argument);
    }
    CHECK_THROWS_AS(w.instant("n", "c", bad), gsync::error);
    CHECK_THROWS_AS(gsync::trace_span(&w, "n", "c", bad), gsync::error);
  }
  // An end before the start is written as a zero duration.
  const auto now = std::chrono::steady_clock::now();
  w.complete("backwards", "c", now, now - std::chrono::milliseconds(5));
  w.flush();
  const std::string t = read_file(dir.path + "/ok.json");
  CHECK(t.find("\"name\":\"backwards\"") != std::string::npos);
  CHECK(t.find("\"dur\":0.000") != std::string::npos);
  CHECK(count_of(t, "\"ph\":\"X\"") == 1);  // the rejected events left nothing behind
}

TEST_CASE("trace_span: null writer does nothing, end() writes once, temporaries are copied") {
  {
    gsync::trace_span s(static_cast<gsync::trace_writer*>(nullptr), "step", "train", "not json either");
    s.end();
    std::shared_ptr<gsync::trace_writer> none;
    gsync::trace_span s2(none, "step", "train");
  }
  temp_dir dir;
  const std::string path = dir.path + "/s.json";
  {
    auto w = std::make_shared<gsync::trace_writer>(path, 0);
    gsync::trace_span s(w, std::string("layer_") + std::to_string(7), std::string("fw") + "d",
                        "{\"i\":" + std::to_string(7) + "}");
    s.end();
    s.end();
  }
  const std::string t = read_file(path);
  CHECK(count_of(t, "\"ph\":\"X\"") == 1);
  auto doc = parse_json(t);
  REQUIRE(doc);
  bool found = false;
  for (const auto& e : doc->arr())
    if (e.obj().at("ph").str() == "X") {
      CHECK(e.obj().at("name").str() == "layer_7");
      CHECK(e.obj().at("cat").str() == "fwd");
      CHECK(e.obj().at("args").obj().at("i").num() == "7");
      found = true;
    }
  CHECK(found);
}

TEST_CASE("trace_writer::from_env: unset/empty -> null, %r and .json insertion, unopenable -> null") {
  temp_dir dir;
  {
    scoped_env e("GSYNC_TRACE", nullptr);
    CHECK(gsync::trace_writer::from_env(0) == nullptr);
  }
  {
    scoped_env e("GSYNC_TRACE", "");
    CHECK(gsync::trace_writer::from_env(0) == nullptr);
  }
  {
    const std::string tmpl = dir.path + "/r%r_trace.json";
    scoped_env e("GSYNC_TRACE", tmpl.c_str());
    for (int rank : {0, 2, 5}) {
      auto w = gsync::trace_writer::from_env(rank);
      REQUIRE(w != nullptr);
      CHECK(w->path() == dir.path + "/r" + std::to_string(rank) + "_trace.json");
      CHECK(w->rank() == rank);
    }
    for (int rank : {0, 2, 5}) {
      const std::string t = read_file(dir.path + "/r" + std::to_string(rank) + "_trace.json");
      CHECK(t.find("\"name\":\"rank " + std::to_string(rank) + "\"") != std::string::npos);
      CHECK(parse_json(t).has_value());
    }
  }
  {
    const std::string tmpl = dir.path + "/trace.json";
    scoped_env e("GSYNC_TRACE", tmpl.c_str());
    auto w = gsync::trace_writer::from_env(3);
    REQUIRE(w != nullptr);
    CHECK(w->path() == dir.path + "/trace.3.json");
    w->complete("a", "b", std::chrono::steady_clock::now(), std::chrono::steady_clock::now());
    w.reset();
    CHECK(parse_json(read_file(dir.path + "/trace.3.json")).has_value());
  }
  {
    const std::string tmpl = dir.path + "/no/such/dir/trace.json";
    scoped_env e("GSYNC_TRACE", tmpl.c_str());
    CHECK(gsync::trace_writer::from_env(1) == nullptr);  // and one WARN line on stderr
  }
}

// ---- Wired into communicators -------------------------------------------------------------------

TEST_CASE("communicator: every operation is counted and traced (kind, bytes, failures)") {
  temp_dir dir;
  std::vector<std::string> paths(3);
  gsync_test::run_inproc(3, [&](auto& comm, gsync_test::world_sync& sync) {
    const std::string path = dir.path + "/comm." + std::to_string(comm.rank()) + ".json";
    paths[static_cast<std::size_t>(comm.rank())] = path;
    comm.set_trace(std::make_shared<gsync::trace_writer>(path, comm.rank()));
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 3; ++i) gsync::allreduce(comm, std::span<float>{v});
    std::vector<double> x(2, 1.0), g(6);
    gsync::allgather(comm, std::span<const double>{x}, std::span<double>{g});
    gsync::barrier(comm);
    gsync::allreduce_async(comm, std::span<float>{v}).wait();
    {
      gsync::trace_span step(comm.trace(), "my_step", "train", R"({"step":1})");
    }
    const auto ar = comm.counters().get("allreduce");
    CHECK(ar.calls == 4);
    CHECK(ar.bytes == 4 * 1000 * sizeof(float));
    CHECK(ar.failures == 0);
    CHECK(comm.counters().get("allgather").bytes == 2 * sizeof(double));
    CHECK(comm.counters().get("barrier").calls == 1);
    CHECK(comm.counters().report().find("allreduce") != std::string::npos);
    sync.bar.arrive_and_wait();
    if (comm.rank() == 0) {  // a failing call is counted as a failure
      comm.set_timeout(std::chrono::milliseconds(200));
      std::vector<float> w(4);
      CHECK_THROWS_AS(gsync::recv(comm, std::span<float>{w}, 1, 7), gsync::error);
      CHECK(comm.counters().get("recv").failures == 1);
    }
    sync.bar.arrive_and_wait();
    comm.set_trace(nullptr);  // flushes and closes the file
  });
  const std::string text = read_file(paths[0]);
  CHECK(count_of(text, "\"name\":\"allreduce\"") == 4);
  CHECK(count_of(text, "\"name\":\"allgather\"") == 1);
  CHECK(count_of(text, "\"name\":\"my_step\"") == 1);
  CHECK(text.find("\"bytes\":4000") != std::string::npos);
  CHECK(text.find("\"failed\":true") != std::string::npos);
  CHECK(parse_json(text).has_value());
  CHECK(count_of(read_file(paths[2]), "\"name\":\"allreduce\"") == 4);
}
