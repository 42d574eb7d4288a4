#include "perf/collectives/perf_driver.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <limits>
#include <map>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "backend/store/c10d_store.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/standard/collectives.h"

namespace pride::perf {
namespace {

using Clock = std::chrono::steady_clock;

struct Sweep {
  std::string min_text = "4", max_text = "64M";
  uint64_t min_bytes = 0, max_bytes = 0;
  uint64_t step_factor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 0;
};

// The largest size a row may have (1 TiB): far past any host's memory, and small enough that the sweep's
// products cannot wrap around.
constexpr uint64_t kMaxBytes = uint64_t(1) << 40;

// "4", "64K", "64M", "1G" (binary multiples, as nccl-tests reads them).
uint64_t parse_bytes(const std::string& text, const char* flag) {
  // strtoull would take "-4" as 2^64 - 4 and clamp an overflow silently: only digits are a size.
  const size_t first_non_digit = text.find_first_not_of("0123456789");
  PRIDE_CHECK_ARG(first_non_digit != 0 && !text.empty(), "{} '{}' is not a size (a whole number of bytes, with K, M or G)",
                  flag, text);
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  std::string suffix(end);
  uint64_t scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1ull << 10;
  else if (suffix == "M" || suffix == "m") scale = 1ull << 20;
  else if (suffix == "G" || suffix == "g") scale = 1ull << 30;
  else PRIDE_CHECK_ARG(suffix.empty(), "{} '{}': unknown suffix '{}' (K, M or G)", flag, text, suffix);
  PRIDE_CHECK_ARG(errno != ERANGE && v <= kMaxBytes / scale, "{} '{}' is larger than the {} bytes (1 TiB) a row may "
                  "have", flag, text, kMaxBytes);
  return uint64_t(v) * scale;
}

std::vector<uint64_t> sweep_sizes(const Sweep& s) {
  std::vector<uint64_t> sizes;
  for (uint64_t b = s.min_bytes; b <= s.max_bytes;) {
    sizes.push_back(b);
    if (b == 0) {
      b = 1;  // 0 bytes is a valid no-op row; multiplying would never leave it
    } else if (b > s.max_bytes / s.step_factor) {
      break;
    } else {
      b *= s.step_factor;
    }
  }
  return sizes;
}

// Every rank leaves only after every rank has entered, so one iteration's stragglers stay out of the
// next one's time. Its traffic is outside the snapshots that measure the collective.
void sync(Communicator& comm) { barrier(comm); }

// What the communicator counted, so that one call's bytes and algorithm are a difference of two.
struct TrafficSnapshot {
  uint64_t bytes_sent = 0;
  std::map<std::string, uint64_t> calls;
  static TrafficSnapshot take(const Communicator& comm) {
    TrafficSnapshot s;
    for (const auto& [key, c] : comm.traffic()) {
      s.bytes_sent += c.bytes_sent;
      s.calls[key] = c.calls;
    }
    return s;
  }
};

// One rank's measurements for one row, published through the store for rank 0 (plain bytes).
struct RowStats {
  double time_us = 0;        // mean over the timed iterations
  uint64_t bytes_sent = 0;   // payload bytes this rank sent, summed over the timed iterations
  uint64_t wrong = 0;
  char algorithm[32] = {};   // the traffic key the collective counted under
};

void publish(Store& store, const std::string& key, const RowStats& s) {
  std::vector<uint8_t> v(sizeof s);
  std::memcpy(v.data(), &s, sizeof s);
  store.set(key, v);
}

RowStats fetch(Store& store, const std::string& key) {
  auto v = store.get(key);
  PRIDE_ENFORCE(v.size() == sizeof(RowStats), "store key {} holds {} bytes, expected {}", key, v.size(),
                sizeof(RowStats));
  RowStats s;
  std::memcpy(&s, v.data(), sizeof s);
  return s;
}

RowStats measure(Communicator& comm, Benchmark& bench, const Sweep& sweep) {
  for (int i = 0; i < sweep.warmup; ++i) {
    bench.restore_input();
    sync(comm);
    bench.run(comm);
  }
  RowStats stats;
  double total_us = 0;
  std::map<std::string, uint64_t> calls_by_key;
  for (int i = 0; i < sweep.iters; ++i) {
    bench.restore_input();
    sync(comm);
    auto before = TrafficSnapshot::take(comm);
    auto t0 = Clock::now();
    bench.run(comm);
    auto t1 = Clock::now();
    auto after = TrafficSnapshot::take(comm);
    total_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    stats.bytes_sent += after.bytes_sent - before.bytes_sent;
    for (const auto& [key, calls] : after.calls) {
      auto it = before.calls.find(key);
      uint64_t prior = it == before.calls.end() ? 0 : it->second;
      if (calls > prior) calls_by_key[key] += calls - prior;
    }
  }
  stats.time_us = total_us / sweep.iters;
  std::string algorithm;
  for (const auto& [key, calls] : calls_by_key) algorithm += (algorithm.empty() ? "" : "+") + key;
  if (algorithm.empty()) algorithm = "-";  // nothing was sent (one rank, or numel 0)
  std::snprintf(stats.algorithm, sizeof stats.algorithm, "%s", algorithm.c_str());
  if (sweep.check) stats.wrong = bench.count_wrong(comm);
  return stats;
}

std::string format_bits(double bits) { return bits < 0 ? "-" : fmt::format("{:.3f}", bits); }

// nccl-tests prints N/A where it did not check (-c 0), so that an unchecked run never reads as a correct one.
std::string format_wrong(bool checked, uint64_t wrong) { return checked ? std::to_string(wrong) : "N/A"; }

class Table {
 public:
  void header() const {
    fmt::print("#\n# {:>12} {:>12} {:>9} {:>15} {:>10} {:>11} {:>11} {:>15} {:>8} {:>7}\n", "size", "count", "type",
               "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wire_bits/elem", "formula", "#wrong");
  }
  // bus_factor: nccl-tests' busbw / algbw for the collective; negative: busbw is the bytes a rank
  // actually put on the wire per second (sign-allreduce, which nccl-tests has no formula for).
  void row(uint64_t bytes, size_t count, const std::string& type, const std::string& algo, double time_us,
           double bytes_sent_per_rank, double bus_factor, double wire_bits, double formula, const std::string& wrong) {
    // algbw: the bytes the caller handed in.
    double algbw = time_us > 0 ? double(bytes) / time_us / 1e3 : 0;
    double busbw = bus_factor >= 0 ? algbw * bus_factor : time_us > 0 ? bytes_sent_per_rank / time_us / 1e3 : 0;
    fmt::print("  {:>12} {:>12} {:>9} {:>15} {:>10.1f} {:>11.3f} {:>11.3f} {:>15} {:>8} {:>7}\n", bytes, count, type,
               algo, time_us, algbw, busbw, format_bits(wire_bits), format_bits(formula), wrong);
    std::fflush(stdout);
    busbw_sum_ += busbw;
    ++rows_;
  }
  double avg_busbw() const { return rows_ ? busbw_sum_ / double(rows_) : 0; }

 private:
  double busbw_sum_ = 0;
  int rows_ = 0;
};

void print_ranks(Store& store, const Communicator& comm) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string me = fmt::format("#  Rank {:2} pid {:7} on {}", comm.rank(), getpid(), host);
  // The route to each peer (nccl-tests prints devices): shows which UCX transports carry the data.
  constexpr int kShownPeers = 8;
  std::string routes;
  for (int p = 0, shown = 0; p < comm.size(); ++p) {
    if (p == comm.rank()) continue;
    if (shown++ == kShownPeers) {
      routes += " ...";
      break;
    }
    routes += fmt::format(" {}:{}", p, comm.transport().route(p));
  }
  if (!routes.empty()) me += ", via" + routes;
  store.set(fmt::format("who/{}", comm.rank()), std::vector<uint8_t>(me.begin(), me.end()));
  if (comm.rank() != 0) return;
  for (int r = 0; r < comm.size(); ++r) {
    auto v = store.get(fmt::format("who/{}", r));
    fmt::print("{}\n", std::string(v.begin(), v.end()));
  }
}

int run(const std::string& tool, Benchmark& bench, const Sweep& sweep, const std::vector<uint64_t>& sizes) {
  LaunchEnv env = read_launch_env();
  auto base = make_prefix_store("perf", connect_store(env, Settings::get().timeout));
  Communicator comm(make_prefix_store("comm", base), env.rank, env.world_size, {});
  const bool root = comm.rank() == 0;
  if (root) {
    fmt::print("# {}: {} ranks on {} host(s), {}, iters {}, warmup {}, check {}, kernels {} x {} thread(s), "
               "timeout {} s\n",
               tool, comm.size(), comm.num_nodes(), bench.describe(), sweep.iters, sweep.warmup, sweep.check,
               bits::isa_name(bits::active_isa()), comm.kernel_threads(), comm.timeout().count() / 1000.0);
  }
  print_ranks(*base, comm);
  const double bus_factor = bench.bus_factor(comm.size());
  if (root) {
    fmt::print("#\n# time: mean per call over -n iterations (ranks synchronised before each), slowest rank\n");
    if (bus_factor >= 0) {
      fmt::print("# busbw: algbw x {:.6g}, nccl-tests' bus bandwidth for {} ranks\n", bus_factor, comm.size());
      fmt::print("# wire_bits/elem: payload bits a rank sent per element (fingerprints excluded), mean over ranks\n");
    } else {
      fmt::print("# busbw, wire_bits/elem: payload bytes a rank sent (fingerprints excluded), mean over ranks\n");
    }
  }

  Table table;
  uint64_t my_wrong = 0;
  int row_id = 0;
  for (const auto& block : bench.blocks()) {
    if (root) table.header();
    size_t previous_count = std::numeric_limits<size_t>::max();
    for (uint64_t bytes : sizes) {
      // Sizes are whole elements: a size that rounds down to the previous row's count is that row again.
      const size_t count = bytes / bench.element_size();
      if (count == previous_count) continue;
      previous_count = count;
      bench.setup(comm, block, count);
      RowStats mine = measure(comm, bench, sweep);
      my_wrong += mine.wrong;
      std::string key_prefix = fmt::format("row/{}/", row_id++);
      if (!root) {
        publish(*base, key_prefix + std::to_string(comm.rank()), mine);
        continue;
      }
      double slowest_us = mine.time_us, sent = double(mine.bytes_sent);
      uint64_t wrong = mine.wrong;
      for (int r = 1; r < comm.size(); ++r) {
        RowStats s = fetch(*base, key_prefix + std::to_string(r));
        slowest_us = std::max(slowest_us, s.time_us);
        sent += double(s.bytes_sent);
        wrong += s.wrong;
      }
      double sent_per_rank_call = sent / comm.size() / sweep.iters;
      double wire_bits = count ? sent_per_rank_call * 8 / double(count) : -1;
      std::string algo = mine.algorithm;
      table.row(count * bench.element_size(), count, bench.type_name(), algo, slowest_us, sent_per_rank_call,
                bus_factor, wire_bits, bench.formula_bits(comm, algo), format_wrong(sweep.check != 0, wrong));
    }
  }

  // The exit code must agree on every rank: total the wrong values through the store.
  base->add("wrong", int64_t(my_wrong));
  sync(comm);
  int64_t total_wrong = base->add("wrong", 0);
  if (root) {
    if (sweep.check) {
      fmt::print("# Out of bounds values : {} {}\n", total_wrong, total_wrong ? "FAILED" : "OK");
    } else {
      fmt::print("# Out of bounds values : N/A (not checked; -c 1 checks every rank's result)\n");
    }
    fmt::print("# Avg bus bandwidth    : {:.3f}\n#\n", table.avg_busbw());
  }
  sync(comm);  // rank 0 hosts the store: it must not leave while others still read from it
  // Goodbyes before the endpoints close: without them a rank whose peer closed first would take the
  // close for a failure and warn about it.
  comm.close(std::chrono::seconds(5));
  return total_wrong ? 1 : 0;
}

}  // namespace

int perf_main(int argc, char** argv, const std::string& tool, Benchmark& bench) {
  // Line by line, as a user watching a long sweep (or a log cut by a timeout or a kill) needs it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* rank_env = std::getenv("RANK");
  const std::string who = fmt::format("{} rank {}", tool, rank_env ? rank_env : "?");
  CLI::App app{tool + ": nccl-tests-style benchmark of pride collectives. Launch with torchrun --no-python, or "
                      "set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."};
  Sweep sweep;
  app.add_option("-b,--minbytes", sweep.min_text, "smallest size in bytes of the caller's tensor (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", sweep.max_text, "largest size in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", sweep.step_factor, "multiply the size by this between rows")
      ->check(CLI::Range(uint64_t(2), uint64_t(1) << 20))
      ->capture_default_str();
  app.add_option("-n,--iters", sweep.iters, "timed iterations per size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("-w,--warmup_iters", sweep.warmup, "untimed iterations first")->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("-c,--check", sweep.check, "check every rank's result against the oracle (0/1)")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  bench.add_flags(app);
  std::vector<uint64_t> sizes;
  try {
    app.parse(argc, argv);
    bench.validate();
    sweep.min_bytes = parse_bytes(sweep.min_text, "-b");
    sweep.max_bytes = parse_bytes(sweep.max_text, "-e");
    PRIDE_CHECK_ARG(sweep.min_bytes <= sweep.max_bytes, "-b {} is larger than -e {}", sweep.min_bytes,
                    sweep.max_bytes);
    sizes = sweep_sizes(sweep);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a bad flag exits 2 like every other bad argument (CLI11's own codes vary).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", who, e.what());
    return 2;
  }
  try {
    return run(tool, bench, sweep, sizes);
  } catch (const std::exception& e) {
    // pride's errors already name the collective and the peer; add who is reporting.
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
    return 2;
  }
}

}  // namespace pride::perf
