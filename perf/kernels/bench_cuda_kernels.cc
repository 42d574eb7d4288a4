// Bandwidth of the CUDA bit kernels, each next to a device-to-device copy of the same bytes measured in
// the same run (SPEC §5: kernels at >= 0.8x the HBM bandwidth of a same-size copy). --help lists the flags.
//
// Definitions (printed with the table):
//   bytes     = every byte the kernel must move through device memory: each input read once and each
//               output written once (pack: n*size read + n/8 written; lion_vote: g and m read, m written,
//               plus the bits; apply: x read and written plus the bits; count: N planes in, the counter out).
//   GB/s      = bytes / time.
//   vs copy   = the kernel's GB/s over cudaMemcpy's device-to-device GB/s of the whole tensor (the
//               header's copy), which counts each copied byte twice (read and written) the same way.
//   vs same-size = the same against a copy of half the kernel's bytes (as many read + written bytes as
//               the kernel moves), timed right after it: the target's "same-size copy".
// The *_slices rows run DistributedLion's two halves as its step does: the same n elements laid out as
// 100 tensors of a model's varied sizes, one launch over all their slices (bytes: as the rows above);
// lion_local_slices is a world of one's whole step in one launch (read g, m, x; write m, x).
// The coded-result rows (encode/decode of counts and trits) have no SPEC target; they say what coding
// costs next to the wire it saves.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/tensor_slices.h"
#include "collectives/bits/levels.h"
#include "collectives/bits/trit_coding.h"

namespace {

using pride::bits::DType;
namespace cuda = pride::bits::cuda;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_cuda_kernels: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median of `reps` timed runs (CUDA events) after two warm-ups, in seconds.
double median_seconds(const std::function<cudaError_t()>& run, int reps) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(run(), "warm-up");
  check(run(), "warm-up");
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(start), "record");
    check(run(), "launch");
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void* device_random(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  // Random bytes, generated on the host once: timings must not run on zeros.
  std::vector<uint32_t> host((bytes + 3) / 4);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& v : host) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = uint32_t(s) & 0xBFFFFFFFu;  // finite values: clear the top exponent bit of float32 words
  }
  check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
  return p;
}

// The same n elements as DistributedLion lays out a model's tensors (perf/bench_dlion_cuda.py's sizes:
// a few large, many small; each tensor on a 64-element word, cut into slices of kSliceElements), as
// the device table of (g, m) slices (`lion`), of x slices (`apply`) and of (g, m, x) slices (`local`,
// a world of one's whole step).
struct SliceTables {
  cuda::TensorSlice* lion = nullptr;
  cuda::TensorSlice* apply = nullptr;
  cuda::LocalSlice* local = nullptr;
  size_t count = 0;
};

SliceTables model_slices(size_t n, size_t tensors, size_t element_size, const void* g, void* m, void* x) {
  std::vector<double> weights(tensors);
  uint64_t s = 0x853C49E6748FEA9Bull;
  double sum = 0;
  for (double& w : weights) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const double u = double(s >> 11) / double(uint64_t(1) << 53);
    w = u * u * u + 0.01;
    sum += w;
  }
  const size_t usable = n - tensors * 64;  // room for every tensor's padding to its word
  std::vector<cuda::TensorSlice> lion, apply;
  std::vector<cuda::LocalSlice> local;
  size_t flat = 0;
  for (double w : weights) {
    const size_t numel = std::max<size_t>(1, size_t(w / sum * double(usable)));
    for (size_t at = 0; at < numel; at += cuda::kSliceElements) {
      const uint32_t count = uint32_t(std::min<size_t>(cuda::kSliceElements, numel - at));
      const size_t offset = (flat + at) * element_size;
      const uint64_t word = (flat + at) / 64;
      lion.push_back({static_cast<const char*>(g) + offset, static_cast<char*>(m) + offset, word, count, 1u});
      apply.push_back({nullptr, static_cast<char*>(x) + offset, word, count, 1u});
      local.push_back({static_cast<const char*>(g) + offset, static_cast<char*>(m) + offset,
                       static_cast<char*>(x) + offset, count, 1u});
    }
    flat += (numel + 63) / 64 * 64;
  }
  SliceTables t;
  t.count = lion.size();
  check(cudaMalloc(reinterpret_cast<void**>(&t.lion), lion.size() * sizeof(cuda::TensorSlice)), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&t.apply), apply.size() * sizeof(cuda::TensorSlice)), "cudaMalloc");
  check(cudaMemcpy(t.lion, lion.data(), lion.size() * sizeof(cuda::TensorSlice), cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(t.apply, apply.data(), apply.size() * sizeof(cuda::TensorSlice), cudaMemcpyHostToDevice), "upload");
  check(cudaMalloc(reinterpret_cast<void**>(&t.local), local.size() * sizeof(cuda::LocalSlice)), "cudaMalloc");
  check(cudaMemcpy(t.local, local.data(), local.size() * sizeof(cuda::LocalSlice), cudaMemcpyHostToDevice), "upload");
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Bandwidth of pride's CUDA bit kernels next to a device-to-device copy of the same bytes"};
  size_t n = size_t(1) << 28;
  int reps = 20;
  std::string dtype_name = "float32";
  int nranks = 4;
  // Below 2^12 elements the coded rows' quarter of the planes, split among the ranks, would be empty.
  app.add_option("-n,--elements", n, "elements per tensor, 2^12 to 2^34 (default 2^28)")
      ->check(CLI::Range(size_t(1) << 12, size_t(1) << 34));
  app.add_option("-r,--reps", reps, "timed repetitions per kernel (median reported)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("-d,--dtype", dtype_name, "float32 | bfloat16 | float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  app.add_option("-N,--ranks", nranks, "vote planes the count kernel adds (ranks)")
      ->check(CLI::Range(1, cuda::kMaxCountPlanes))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad flag: 2, as every pride tool
  }

  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device\n");
    return 1;
  }
  const DType dtype = dtype_name == "float32" ? DType::kFloat32 : dtype_name == "bfloat16" ? DType::kBFloat16 : DType::kFloat16;
  const size_t es = pride::bits::dtype_size(dtype), W = pride::bits::words_for(n);
  const size_t tensor_bytes = n * es, plane_bytes = W * 8;
  void* x = device_random(tensor_bytes);
  void* y = device_random(tensor_bytes);
  void* m = device_random(tensor_bytes);
  auto* pos = static_cast<uint64_t*>(device_random(plane_bytes));
  auto* neg = static_cast<uint64_t*>(device_random(plane_bytes));
  auto* tie = static_cast<uint64_t*>(device_random(plane_bytes));
  std::vector<uint64_t*> ballots;
  for (int k = 0; k < nranks; ++k) ballots.push_back(static_cast<uint64_t*>(device_random(plane_bytes / size_t(nranks) + 8)));
  const int count_planes = pride::bits::planes_for(nranks);
  auto* counter = static_cast<uint64_t*>(device_random(size_t(count_planes) * plane_bytes / size_t(nranks) + 8));
  const size_t chunk_words = W / size_t(nranks);  // the owner counts its chunk of the planes
  // Coded results (a direct call's result all-gather): a binary mean's counts in base N + 1, and a
  // tie-capable vote's trits, over a quarter of the tensor's words (the coded rows' bytes are planes in
  // and code out, or the reverse).
  const pride::bits::counts::CountCode code = pride::bits::counts::make_code(uint32_t(nranks) + 1);
  const size_t coded_words = W / 4;
  auto* count_planes_in = static_cast<uint64_t*>(device_random(size_t(code.planes) * coded_words * 8 + 8));
  const size_t limb_bytes = pride::bits::counts::bytes_for_words(code, coded_words);
  auto* limbs = static_cast<uint32_t*>(device_random(limb_bytes + 8));
  const size_t trit_bytes = pride::bits::trits::bytes_for_words(coded_words);
  auto* trits = static_cast<uint8_t*>(device_random(trit_bytes + 8));
  // Lion Cub's levels at N ranks (s = 127/N; six planes at N = 4), packed from n int8 values within
  // [−s, s] (out-of-range values would add the flag's stores).
  const int max_level = std::max(1, 127 / nranks), level_planes = pride::bits::level_planes(max_level);
  auto* level_values = static_cast<int8_t*>(device_random(n));
  {
    std::vector<int8_t> host(n);
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (auto& v : host) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      v = int8_t(int(s % uint64_t(2 * max_level + 1)) - max_level);
    }
    check(cudaMemcpy(level_values, host.data(), n, cudaMemcpyHostToDevice), "upload levels");
  }
  auto* levels = static_cast<uint64_t*>(device_random(size_t(level_planes) * plane_bytes));
  auto* out_of_range = static_cast<uint32_t*>(device_random(8));
  // DistributedLion's two halves as its step launches them: over 100 tensors' slices in one launch each
  // (the rows beside the whole-tensor ones say what the slicing costs; timed from n >= 12800).
  const size_t model_tensors = 100;
  const SliceTables slices = n >= 2 * model_tensors * 64 ? model_slices(n, model_tensors, es, x, m, y) : SliceTables{};

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  const double copy_s = median_seconds([&] { return cudaMemcpyAsync(y, x, tensor_bytes, cudaMemcpyDeviceToDevice); }, reps);
  const double copy_gbs = 2.0 * double(tensor_bytes) / copy_s * 1e-9;
  std::printf("# %s, %s, n = %zu elements (%.1f MiB), median of %d\n", prop.name, dtype_name.c_str(), n,
              double(tensor_bytes) / (1 << 20), reps);
  std::printf("# device-to-device copy of %.1f MiB: %.3f ms, %.0f GB/s (read + written)\n",
              double(tensor_bytes) / (1 << 20), copy_s * 1e3, copy_gbs);
  std::printf("%-28s %10s %12s %10s %8s %14s\n", "kernel", "time ms", "bytes MiB", "GB/s", "vs copy",
              "vs same-size");

  struct Row {
    std::string name;
    double bytes;
    std::function<cudaError_t()> run;
  };
  const double tb = double(tensor_bytes), pb = double(plane_bytes);
  std::vector<Row> rows = {
      {"pack_binary", tb + pb, [&] { return cuda::pack_binary(x, dtype, n, pos, nullptr); }},
      {"pack_ternary", tb + 2 * pb, [&] { return cuda::pack_ternary(x, dtype, n, pos, neg, nullptr); }},
      {"pack_levels (s = 127/N)", double(n) + level_planes * pb,
       [&] { return cuda::pack_levels(level_values, n, max_level, levels, out_of_range, nullptr); }},
      {"unpack_vote (+tie)", tb + 2 * pb, [&] { return cuda::unpack_vote(pos, tie, n, y, dtype, nullptr); }},
      // on n/4 elements: its three planes must fit the one-plane buffer
      {"unpack_mean (3 planes)", (tb + 3 * pb) / 4, [&] { return cuda::unpack_mean(pos, 3, n / 4, 2, 4, 4, y, dtype, nullptr); }},
      {"apply_vote (+tie)", 2 * tb + 2 * pb, [&] { return cuda::apply_vote(y, dtype, n, pos, tie, 1e-4, 0.1, nullptr); }},
      {"lion_vote (binary)", 3 * tb + pb, [&] { return cuda::lion_vote(x, m, dtype, n, 0.9, 0.99, pos, nullptr, nullptr); }},
      {"lion_vote (ternary)", 3 * tb + 2 * pb, [&] { return cuda::lion_vote(x, m, dtype, n, 0.9, 0.99, pos, neg, nullptr); }},
      {"count_planes (N planes)", double(nranks + count_planes) * double(chunk_words) * 8,
       [&] {
         std::vector<const uint64_t*> b(ballots.begin(), ballots.end());
         return cuda::count_planes(b.data(), nranks, chunk_words, counter, count_planes, nullptr);
       }},
      {"encode_counts (base N+1)", double(code.planes) * double(coded_words) * 8 + double(limb_bytes),
       [&] { return cuda::encode_counts(code, count_planes_in, coded_words, coded_words, limbs, nullptr); }},
      {"decode_counts (base N+1)", double(code.planes) * double(coded_words) * 8 + double(limb_bytes),
       [&] { return cuda::decode_counts(code, limbs, coded_words, count_planes_in, coded_words, nullptr); }},
      {"encode_trits", 2.0 * double(coded_words) * 8 + double(trit_bytes),
       [&] { return cuda::encode_trits(pos, tie, coded_words, trits, nullptr); }},
      {"decode_trits", 2.0 * double(coded_words) * 8 + double(trit_bytes),
       [&] { return cuda::decode_trits(trits, coded_words, pos, tie, nullptr); }},
  };
  if (slices.count > 0) {  // after the whole-tensor Lion rows
    auto after = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.name == "lion_vote (ternary)"; });
    if (after != rows.end()) ++after;
    rows.insert(after,
                {{"lion_vote_slices (ternary)", 3 * tb + 2 * pb,
                  [&] { return cuda::lion_vote_slices(slices.lion, slices.count, dtype, 0.9, 0.99, pos, neg, nullptr); }},
                 {"apply_vote_slices (+tie)", 2 * tb + 2 * pb,
                  [&] { return cuda::apply_vote_slices(slices.apply, slices.count, dtype, pos, tie, 1e-4, 0.1, nullptr); }},
                 {"lion_local_slices (N = 1)", 5 * tb,
                  [&] {
                    return cuda::lion_local_slices(slices.local, slices.count, dtype, 0.9, 0.99, true, 1e-4, 0.1,
                                                   nullptr);
                  }}});
  }
  // Copy buffers for the largest kernel's bytes (half of them copied: read + written).
  double largest = 0;
  for (const Row& r : rows) largest = std::max(largest, r.bytes);
  void* copy_from = device_random(size_t(largest / 2) + 1);
  void* copy_to = device_random(size_t(largest / 2) + 1);
  // Each kernel next to a copy of its own size too (half its bytes copied: read + written), where launch
  // latency weighs the same on both: the small kernels (unpack_mean, count_planes) are not held to the
  // bandwidth of a 1 GiB copy.
  for (const Row& r : rows) {
    const double s = median_seconds(r.run, reps);
    const double gbs = r.bytes / s * 1e-9;
    const size_t same_bytes = size_t(r.bytes / 2);
    if (same_bytes == 0) {  // nothing to move at this -n
      std::printf("%-28s %10.3f %12.1f %10.0f %8.2f %14s\n", r.name.c_str(), s * 1e3, r.bytes / (1 << 20), gbs,
                  gbs / copy_gbs, "-");
      continue;
    }
    const double same_s = median_seconds(
        [&] { return cudaMemcpyAsync(copy_to, copy_from, same_bytes, cudaMemcpyDeviceToDevice); }, reps);
    const double same_gbs = 2.0 * double(same_bytes) / same_s * 1e-9;
    std::printf("%-28s %10.3f %12.1f %10.0f %8.2f %14.2f\n", r.name.c_str(), s * 1e3, r.bytes / (1 << 20), gbs,
                gbs / copy_gbs, gbs / same_gbs);
  }
  return 0;
}
