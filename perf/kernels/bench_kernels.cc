// Single-threaded throughput of the CPU bit kernels, each next to memcpy of the same bytes measured in
// the same run (SPEC §5). Prints one row per kernel and ISA; --help lists the flags.
//
// Definitions (printed with the table):
//   G elem/s  = n / time (n elements of the tensor, whatever the kernel's inputs are).
//   GB/s      = bytes of the unpacked side / time: n * sizeof(dtype) for pack, unpack and apply
//               (pack reads them, unpack writes them, apply reads and writes them in place).
//   vs memcpy = memcpy time for that many bytes / kernel time (memcpy reads and writes them once).
//   Counter and threshold kernels have no unpacked side; their target is in G elem/s.
//   The fused compressed-Adam steps (compressed_adam.h) read and write several float32 streams per
//   element (a 0/1 Adam local step five in, three out). Their GB/s counts every stream, and their
//   "vs memcpy" is that rate over memcpy's (which moves two streams): 1.0 means memcpy's bandwidth.
//   They have no SPEC target.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "collectives/bits/compressed_adam.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"
#include "collectives/bits/lion_cub.h"
#include "collectives/bits/onebit.h"
#include "collectives/bits/packed_counts.h"
#include "collectives/bits/trits.h"

namespace {

using pride::bits::DType;
using pride::bits::Isa;

// Median of `reps` timed samples after one untimed warm-up, in seconds per call. A sample runs the call
// as often as fills about a millisecond, 64 times at most: a call on small n takes microseconds, where
// one call per sample measured the clock more than the kernel. The cap keeps the optimizer rows, which
// update their state in place (m = 0.99 m + 0.01 g), from decaying it into denormals over thousands
// of calls and timing those.
double median_seconds(const std::function<void()>& run, int reps) {
  using Clock = std::chrono::steady_clock;
  const auto w0 = Clock::now();
  run();
  const double once = std::chrono::duration<double>(Clock::now() - w0).count();
  const int calls = once >= 1e-3 ? 1 : int(std::min(1e-3 / std::max(once, 1e-8), 64.0));
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int c = 0; c < calls; ++c) run();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// "64 MiB", "4 KiB", "512 B": the sizes the table compares with memcpy.
std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// >= 70% of memcpy, >= 20 G elements/s, or none (a kernel SPEC §5 sets no target for: the optimizers'
// steps, and the result codings, whose speed the cost model weighs against the wire they save).
enum class Target { kBandwidth, kRate, kNone };

struct Kernel {
  std::string name;
  size_t unpacked_bytes;  // 0 for kernels that only touch planes
  Target target;
  std::function<void()> run;
  int streams = 0;  // Target::kNone: float32 streams read plus written per element
};

// All buffers the kernels read and write, allocated and touched once.
struct Buffers {
  size_t n, nwords;
  std::vector<float> f32, out_f32;
  std::vector<float> momentum, variance, accumulated, anchor, flat;  // the compressed-Adam steps' state
  std::vector<uint16_t> bf16, f16, out_16;
  std::vector<uint64_t> votes;    // 8 vote planes
  std::vector<uint64_t> counter;  // 4 planes
  std::vector<uint64_t> counter2, signed_out, pos, neg, tie;
  std::vector<uint8_t> trits;
  std::vector<uint32_t> limbs;  // mean counts packed in base 9 (10 per limb), the densest benched
  std::vector<int8_t> levels;  // the level vote's values at N = 4: [-31, 31]

  explicit Buffers(size_t elements)
      : n(elements),
        nwords(pride::bits::words_for(elements)),
        f32(elements),
        out_f32(elements),
        momentum(elements),
        variance(elements),
        accumulated(elements),
        anchor(elements),
        flat(elements),
        bf16(elements),
        f16(elements),
        out_16(elements),
        votes(8 * nwords),
        counter(4 * nwords),
        counter2(4 * nwords),
        signed_out(4 * nwords),
        pos(nwords),
        neg(nwords),
        tie(nwords),
        trits(pride::bits::trits::bytes_for_words(nwords)),
        limbs(pride::bits::counts::limbs_for_words(pride::bits::counts::make_code(9), nwords)),
        levels(elements) {
    std::mt19937_64 gen(1);
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < n; ++i) {
      f32[i] = normal(gen);
      uint32_t u;
      std::memcpy(&u, &f32[i], 4);
      bf16[i] = static_cast<uint16_t>(u >> 16);
      f16[i] = static_cast<uint16_t>(gen());
      momentum[i] = 0.1f * normal(gen);
      variance[i] = 0.01f * f32[i] * f32[i];
    }
    for (auto& v : levels) v = static_cast<int8_t>(int(gen() % 63) - 31);
    for (auto& w : votes) w = gen();
    for (auto& w : counter2) w = gen();
  }
  const uint64_t* vote(int r) const { return votes.data() + r * nwords; }
};

std::vector<Kernel> kernels(Buffers& b) {
  const size_t n = b.n, nw = b.nwords;
  std::vector<const uint64_t*> planes;
  for (int r = 0; r < 8; ++r) planes.push_back(b.vote(r));
  using namespace pride::bits;
  return {
      {"pack_binary fp32", 4 * n, Target::kBandwidth, [&b, n] { pack_binary(b.f32.data(), DType::kFloat32, n, b.pos.data()); }},
      {"pack_binary bf16", 2 * n, Target::kBandwidth, [&b, n] { pack_binary(b.bf16.data(), DType::kBFloat16, n, b.pos.data()); }},
      {"pack_binary fp16", 2 * n, Target::kBandwidth, [&b, n] { pack_binary(b.f16.data(), DType::kFloat16, n, b.pos.data()); }},
      {"pack_ternary fp32", 4 * n, Target::kBandwidth,
       [&b, n] { pack_ternary(b.f32.data(), DType::kFloat32, n, b.pos.data(), b.neg.data()); }},
      {"unpack_vote fp32", 4 * n, Target::kBandwidth,
       [&b, n] { unpack_vote(b.vote(0), nullptr, n, b.out_f32.data(), DType::kFloat32); }},
      {"unpack_vote fp32 +tie", 4 * n, Target::kBandwidth,
       [&b, n] { unpack_vote(b.vote(0), b.vote(1), n, b.out_f32.data(), DType::kFloat32); }},
      {"unpack_vote bf16", 2 * n, Target::kBandwidth,
       [&b, n] { unpack_vote(b.vote(0), nullptr, n, b.out_16.data(), DType::kBFloat16); }},
      {"unpack_mean fp32 N=8", 4 * n, Target::kBandwidth,
       [&b, n] { unpack_mean(b.counter2.data(), 4, n, 2, 8, 8, b.out_f32.data(), DType::kFloat32); }},
      {"apply_vote fp32", 4 * n, Target::kBandwidth,
       [&b, n] { apply_vote(b.f32.data(), DType::kFloat32, n, b.vote(0), nullptr, 1e-4, 0.1); }},
      {"apply_vote bf16", 2 * n, Target::kBandwidth,
       [&b, n] { apply_vote(b.bf16.data(), DType::kBFloat16, n, b.vote(0), nullptr, 1e-4, 0.1); }},
      // Distributed Lion's fused local step (lion_impl.h): reads g and m, writes m and both vote planes
      // (the default exact votes pack ternary). Three float streams.
      {"lion_vote fp32 ternary", 4 * n, Target::kNone, [&b, n] {
         lion_vote(b.out_f32.data(), b.momentum.data(), DType::kFloat32, n, 0.9, 0.99, b.pos.data(), b.neg.data());
       }, 3},
      {"lion_vote bf16 ternary", 2 * n, Target::kNone, [&b, n] {
         lion_vote(b.out_16.data(), b.bf16.data(), DType::kBFloat16, n, 0.9, 0.99, b.pos.data(), b.neg.data());
       }, 3},
      {"counter_add_plane P=4", 0, Target::kRate, [&b, nw] { counter_add_plane(b.counter.data(), 4, nw, b.vote(0)); }},
      {"counter_add P=4+4", 0, Target::kRate, [&b, nw] { counter_add(b.counter.data(), 4, b.counter2.data(), 4, nw); }},
      // The mean of ternary votes at N = 4 (sign_plan.h): pos − neg + 4 from two 3-plane counters into 4 planes.
      {"counter_signed_offset 3->4", 0, Target::kRate,
       [&b, nw] { counter_signed_offset(b.counter2.data(), b.counter.data(), 3, nw, 4, b.signed_out.data(), 4, nw); }},
      {"count_planes N=4", 0, Target::kRate, [&b, nw, planes] { count_planes(planes.data(), 4, nw, b.counter.data(), 3); }},
      {"count_planes N=8", 0, Target::kRate, [&b, nw, planes] { count_planes(planes.data(), 8, nw, b.counter.data(), 4); }},
      {"vote_from_count P=4", 0, Target::kRate,
       [&b, nw] { vote_from_count(b.counter2.data(), 4, nw, 8, b.pos.data(), b.tie.data()); }},
      {"vote_from_counts P=4", 0, Target::kRate,
       [&b, nw] { vote_from_counts(b.counter2.data(), b.counter.data(), 4, nw, b.pos.data(), b.tie.data()); }},
      // A tied vote's result as trits (trits.h): what the direct algorithm's owner encodes and every
      // rank decodes when PRIDE_RESULT_CODING picks them. pos and tie as finalize leaves them.
      {"encode_trits", 0, Target::kNone, [&b, nw] { encode_trits(b.pos.data(), b.tie.data(), nw, b.trits.data()); }},
      {"decode_trits", 0, Target::kNone, [&b, nw] { decode_trits(b.trits.data(), nw, b.pos.data(), b.tie.data()); }},
      // Counts packed in base B (packed_counts.h), as the direct algorithm's owner encodes and every
      // rank decodes a mean's when PRIDE_RESULT_CODING picks them: B = 3 (N = 2; hier's node counts
      // of 2 ranks), B = 5 (N = 4, 3 planes), B = 9 (N = 8, 4 planes). The values do not change the work.
      {"encode_counts B=3", 0, Target::kNone,
       [&b, nw] { encode_counts(counts::make_code(3), b.counter.data(), nw, nw, b.limbs.data()); }},
      {"decode_counts B=3", 0, Target::kNone,
       [&b, nw] { decode_counts(counts::make_code(3), b.limbs.data(), nw, b.counter.data(), nw); }},
      {"encode_counts B=5", 0, Target::kNone,
       [&b, nw] { encode_counts(counts::make_code(5), b.counter.data(), nw, nw, b.limbs.data()); }},
      {"decode_counts B=5", 0, Target::kNone,
       [&b, nw] { decode_counts(counts::make_code(5), b.limbs.data(), nw, b.counter.data(), nw); }},
      {"encode_counts B=9", 0, Target::kNone,
       [&b, nw] { encode_counts(counts::make_code(9), b.counter.data(), nw, nw, b.limbs.data()); }},
      {"decode_counts B=9", 0, Target::kNone,
       [&b, nw] { decode_counts(counts::make_code(9), b.limbs.data(), nw, b.counter.data(), nw); }},
      // The level vote's packing (levels.h) at N = 4: 63 levels in 6 planes, into the vote planes.
      {"levels_within s=31", n, Target::kBandwidth,
       [&b, n] { volatile bool ok = levels_within(b.levels.data(), n, 31); (void)ok; }},
      {"pack_levels s=31", n, Target::kBandwidth, [&b, n] { pack_levels(b.levels.data(), n, 31, b.votes.data()); }},
      // 1-bit Adam's compression (onebit.h), last because the feedback step writes the fp32 input.
      // A worker's part: y = x + error with Σ y², then signs and the new error; the owner's average
      // of 4 ranks' signs; the decompression.
      {"onebit add_error+square", 4 * n, Target::kBandwidth,
       [&b, n] { (void)add_error_and_square_sum(b.f32.data(), b.out_f32.data(), n); }},
      {"onebit compress_signs", 4 * n, Target::kBandwidth,
       [&b, n] { compress_signs(b.f32.data(), 0.5f, n, b.pos.data(), b.out_f32.data()); }},
      {"onebit average_signs N=4", 4 * n, Target::kBandwidth, [&b, n, planes] {
         const float scales[4] = {0.5f, 0.25f, 1.0f, 2.0f};
         average_signs(planes.data(), scales, 4, n, b.out_f32.data());
       }},
      {"onebit expand_signs", 4 * n, Target::kBandwidth,
       [&b, n] { expand_signs(b.vote(0), 0.5f, n, b.out_f32.data()); }},
      // 1-bit Adam's and 0/1 Adam's fused steps after the variance froze (compressed_adam.h), on fp32
      // parameters (f32) with out_f32 as the gradient and `flat` as the allreduce's input or result.
      // The last number is the streams: local step reads p, g, m, v, acc and writes p, m, acc (or the
      // scaled input); sync out reads mean, v, anchor and writes m, anchor, p, acc; momentum reads g, m
      // and writes m, out; apply reads mean, v, p and writes m, p.
      {"0/1 Adam local step", 4 * n, Target::kNone, [&b, n] {
         zero_one_adam_local_step(b.f32.data(), b.out_f32.data(), DType::kFloat32, b.momentum.data(),
                                  b.variance.data(), b.accumulated.data(), n, {}, nullptr);
       }, 8},
      {"0/1 Adam local + sync in", 4 * n, Target::kNone, [&b, n] {
         zero_one_adam_local_step(b.f32.data(), b.out_f32.data(), DType::kFloat32, b.momentum.data(),
                                  b.variance.data(), b.accumulated.data(), n, {}, b.flat.data());
       }, 8},
      {"0/1 Adam sync out", 4 * n, Target::kNone, [&b, n] {
         AdamSync sync;
         sync.lr_sum = 1e-3;
         zero_one_adam_sync(b.flat.data(), b.variance.data(), b.momentum.data(), b.anchor.data(),
                            b.accumulated.data(), b.f32.data(), DType::kFloat32, n, sync);
       }, 7},
      {"1-bit Adam momentum", 4 * n, Target::kNone, [&b, n] {
         onebit_adam_momentum(b.out_f32.data(), DType::kFloat32, b.momentum.data(), n, 0.9, b.flat.data());
       }, 4},
      {"1-bit Adam apply", 4 * n, Target::kNone, [&b, n] {
         onebit_adam_apply(b.flat.data(), b.variance.data(), b.momentum.data(), b.f32.data(), DType::kFloat32, n, {});
       }, 5},
      // Lion Cub's fused CPU step (lion_cub.h) on fp32: the interpolation reads g (out_f32) and m and writes
      // m and c (flat), 4 streams; the levels read c and write int8 q (levels); the apply reads the int8
      // sums (levels) and p (f32) and writes p. Last: they overwrite the level vote's values.
      {"lion_cub interpolate fp32", 4 * n, Target::kNone, [&b, n] {
         (void)lion_cub_interpolate(b.out_f32.data(), b.momentum.data(), DType::kFloat32, n, 0.9, 0.99, b.flat.data());
       }, 4},
      {"lion_cub levels s=31", 4 * n, Target::kBandwidth,
       [&b, n] { lion_cub_levels(b.flat.data(), n, 0.1f, 31, b.levels.data()); }},
      {"lion_cub apply_sign fp32", 4 * n, Target::kBandwidth,
       [&b, n] { lion_cub_apply_sign(b.f32.data(), DType::kFloat32, n, b.levels.data(), 1e-4, 0.1); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Throughput of pride's CPU bit kernels next to memcpy (one thread)"};
  int log2n = 24;
  int reps = 11;
  std::string isa_choice = "all";
  app.add_option("-n,--log2n", log2n, "elements per kernel call = 2^log2n")
      ->check(CLI::Range(10, 30))
      ->capture_default_str();
  app.add_option("-r,--reps", reps, "timed repetitions per kernel (the median is reported)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--isa", isa_choice, "scalar, avx2 or all (the supported ones)")
      ->check(CLI::IsMember({"scalar", "avx2", "all"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad flag: 2, as every pride tool
  }

  const size_t n = size_t{1} << log2n;
  // The buffers hold about 44 bytes per element (seven float32 streams, three 16-bit ones, the levels,
  // the planes, memcpy's two): refuse what this machine cannot hold rather than die in an allocation or swap.
  const double need = 44.0 * double(n);
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (physical > 0 && need > 0.8 * physical) {
    std::fprintf(stderr, "bench_kernels: -n %d needs about %.1f GiB of buffers, more than 80%% of this machine's "
                 "%.1f GiB of memory; choose a smaller -n\n", log2n, need / (1 << 30), physical / (1 << 30));
    return 2;
  }
  // memcpy's source and destination: distinct n*4-byte buffers, both page-aligned. Two heap buffers
  // whose addresses differ by a few bytes past a multiple of 4 KiB (as small vectors' do) made glibc's
  // memcpy 20x slower (1.8 GB/s at 16 KiB), and every kernel "met" its target against that.
  auto page_aligned = [n] {
    auto* p = static_cast<char*>(std::aligned_alloc(4096, n * sizeof(float)));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 1, n * sizeof(float));
    return std::unique_ptr<char, decltype(&std::free)>(p, &std::free);
  };
  std::unique_ptr<Buffers> owned;
  std::unique_ptr<char, decltype(&std::free)> memcpy_src(nullptr, &std::free), memcpy_dst(nullptr, &std::free);
  try {
    owned = std::make_unique<Buffers>(n);
    memcpy_src = page_aligned();
    memcpy_dst = page_aligned();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_kernels: could not allocate about %.1f GiB of buffers for -n %d; choose a smaller -n\n",
                 need / (1 << 30), log2n);
    return 2;
  }
  Buffers& buffers = *owned;
  auto list = kernels(buffers);

  // memcpy of each unpacked size, in the same run (buffers above).
  std::map<size_t, double> memcpy_seconds;
  char* src = memcpy_src.get();
  char* dst = memcpy_dst.get();
  for (const auto& k : list)
    if (k.unpacked_bytes && !memcpy_seconds.count(k.unpacked_bytes))
      memcpy_seconds[k.unpacked_bytes] =
          median_seconds([&, bytes = k.unpacked_bytes] { std::memcpy(dst, src, bytes); }, reps);

  std::printf("n = 2^%d = %zu elements, median of %d samples (each about 1 ms of calls, 1 to 64 of them), one thread\n",
              log2n, n, reps);
  std::printf("G elem/s = n / time.  GB/s = unpacked bytes (n * sizeof dtype) / time.\n");
  std::printf("vs memcpy = memcpy(unpacked bytes) time / kernel time, memcpy measured in this run.\n");
  std::printf("Adam rows: GB/s and vs memcpy count every float32 stream read or written (memcpy moves two).\n");
  std::printf("Targets (SPEC 5): pack/unpack/apply vs memcpy >= 0.70; counters and thresholds >= 20 G elem/s.\n\n");
  for (const auto& [bytes, seconds] : memcpy_seconds)
    std::printf("memcpy %s: %.2f GB/s\n", format_bytes(bytes).c_str(), bytes / seconds * 1e-9);
  std::printf("\n%-24s %-7s %9s %8s %10s %7s\n", "kernel", "isa", "G elem/s", "GB/s", "vs memcpy", "target");

  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    if (isa_choice != "all" && isa_choice != pride::bits::isa_name(isa)) continue;
    if (!pride::bits::isa_supported(isa)) {
      std::printf("(%s not supported on this CPU)\n", pride::bits::isa_name(isa));
      continue;
    }
    pride::bits::set_isa(isa);
    for (const auto& k : list) {
      const double t = median_seconds(k.run, reps);
      const double gelem = n / t * 1e-9;
      if (k.target == Target::kNone && k.unpacked_bytes) {
        const double ratio = memcpy_seconds[k.unpacked_bytes] / t * k.streams / 2.0;
        std::printf("%-24s %-7s %9.2f %8.2f %10.2f %7s\n", k.name.c_str(), pride::bits::isa_name(isa), gelem,
                    k.streams * k.unpacked_bytes / t * 1e-9, ratio, "-");
      } else if (k.unpacked_bytes) {
        const double ratio = memcpy_seconds[k.unpacked_bytes] / t;
        std::printf("%-24s %-7s %9.2f %8.2f %10.2f %7s\n", k.name.c_str(), pride::bits::isa_name(isa), gelem,
                    k.unpacked_bytes / t * 1e-9, ratio, ratio >= 0.70 ? "met" : "missed");
      } else {
        std::printf("%-24s %-7s %9.2f %8s %10s %7s\n", k.name.c_str(), pride::bits::isa_name(isa), gelem, "-", "-",
                    k.target == Target::kNone ? "-" : gelem >= 20.0 ? "met" : "missed");
      }
    }
  }
  return 0;
}
