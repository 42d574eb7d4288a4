// The CUDA kernels against the CPU kernels (themselves tested against the oracles): bit for bit, on
// random data with ±0, NaN, inf and subnormals, odd lengths, and buffers that are not 16-byte aligned
// (the scalar paths). Outputs are poisoned first so that an unwritten word shows. Skips cleanly where
// no GPU is present, as on the CI machines.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/tensor_slices.h"
#include "collectives/bits/compressed_adam.h"
#include "collectives/bits/levels.h"
#include "collectives/bits/onebit.h"
#include "collectives/bits/packed_counts.h"
#include "collectives/bits/trits.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine"

// Device memory holding a copy of a host vector, `offset_bytes` past a 256-byte aligned allocation
// (an offset of one element makes every vector access take the unaligned path).
class DeviceBuffer {
 public:
  DeviceBuffer(const void* host, size_t bytes, size_t offset_bytes = 0) : bytes_(bytes), offset_(offset_bytes) {
    EXPECT_EQ(cudaMalloc(&base_, bytes + offset_bytes + 16), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, 0xA5, bytes + offset_bytes + 16), cudaSuccess);  // poison
    if (host != nullptr && bytes > 0) {
      EXPECT_EQ(cudaMemcpy(get(), host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host, size_t offset_bytes = 0)
      : DeviceBuffer(host.data(), host.size() * sizeof(T), offset_bytes) {}
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return static_cast<char*>(base_) + offset_; }
  uint64_t* words() const { return static_cast<uint64_t*>(get()); }
  template <class T>
  std::vector<T> read(size_t count) const {
    std::vector<T> out(count);
    if (count > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), get(), count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  size_t offset_;
};

void finish(cudaError_t launched) {
  ASSERT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
  const cudaError_t done = cudaDeviceSynchronize();
  ASSERT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
}

// Element-wise equality of two dtype buffers: the same bits, or NaN in both. NaN payloads are not
// compared: GPU float arithmetic returns the canonical NaN where the CPU keeps the operand's payload
// (torch on the two devices differs the same way); every other value must match bit for bit.
void expect_same_elements(DType dtype, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
                          const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t n = want.size() / dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) {
    expect_same_value(dtype, want.data(), got.data(), i, what.c_str());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

const std::vector<size_t>& gpu_lengths() {
  static const std::vector<size_t> n = {0, 1, 7, 31, 32, 63, 64, 65, 127, 129, 1000, 4097, 100003, (size_t(1) << 20) + 7};
  return n;
}

constexpr DType kFloats[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// Every test runs once with aligned buffers and once with buffers one element off alignment.
class CudaKernels : public ::testing::TestWithParam<bool> {
 protected:
  size_t offset(DType dtype) const { return GetParam() ? dtype_size(dtype) : 0; }
};

TEST_P(CudaKernels, PackBinaryAndTernaryMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloats) {
    for (size_t n : gpu_lengths()) {
      const auto x = random_values(dtype, n);
      const size_t W = words_for(n);
      std::vector<uint64_t> pos(W), neg(W), bin(W);
      pack_binary(x.data(), dtype, n, bin.data());
      pack_ternary(x.data(), dtype, n, pos.data(), neg.data());
      DeviceBuffer dx(x, offset(dtype)), dbin(nullptr, W * 8), dpos(nullptr, W * 8), dneg(nullptr, W * 8);
      finish(cuda::pack_binary(dx.get(), dtype, n, dbin.words(), nullptr));
      finish(cuda::pack_ternary(dx.get(), dtype, n, dpos.words(), dneg.words(), nullptr));
      EXPECT_EQ(dbin.read<uint64_t>(W), bin) << dtype_name(dtype) << " n=" << n;
      EXPECT_EQ(dpos.read<uint64_t>(W), pos) << dtype_name(dtype) << " n=" << n;
      EXPECT_EQ(dneg.read<uint64_t>(W), neg) << dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST_P(CudaKernels, UnpackVoteMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    for (size_t n : gpu_lengths()) {
      const auto pos = random_plane(n, 0.4);
      auto tie = random_plane(n, 0.3);
      for (bool with_tie : {false, true}) {
        std::vector<uint8_t> want(n * dtype_size(dtype));
        unpack_vote(pos.data(), with_tie ? tie.data() : nullptr, n, want.data(), dtype);
        DeviceBuffer dpos(pos), dtie(tie), dy(nullptr, want.size(), offset(dtype));
        finish(cuda::unpack_vote(dpos.words(), with_tie ? dtie.words() : nullptr, n, dy.get(), dtype, nullptr));
        EXPECT_EQ(dy.read<uint8_t>(want.size()), want) << dtype_name(dtype) << " n=" << n << " tie=" << with_tie;
      }
    }
  }
}

// Lion Cub's level vote packs on the GPU (torch_plugin/cuda_level_ops.h): the same planes as the CPU
// for every level count, and the range check of the same pass agreeing with levels_within.
TEST_P(CudaKernels, PackLevelsMatchesTheCpuAndFlagsValuesOutOfRange) {
  SKIP_WITHOUT_GPU();
  const size_t off = GetParam() ? 1 : 0;
  DeviceBuffer flag(nullptr, sizeof(uint32_t));
  auto* flag_word = static_cast<uint32_t*>(flag.get());
  for (int s : {1, 2, 3, 4, 8, 15, 16, 31, 42, 63, 64, 127}) {  // every plane count, 2 … 8
    std::uniform_int_distribution<int> level(-s, s);
    const int planes = level_planes(s);
    for (size_t n : gpu_lengths()) {
      std::vector<int8_t> q(n);
      for (auto& v : q) v = int8_t(level(rng()));
      const size_t W = words_for(n);
      std::vector<uint64_t> want(size_t(planes) * W);
      pack_levels(q.data(), n, s, want.data());
      DeviceBuffer dq(q, off), dout(nullptr, want.size() * 8);
      finish(cuda::pack_levels(static_cast<const int8_t*>(dq.get()), n, s, dout.words(), flag_word, nullptr));
      EXPECT_EQ(dout.read<uint64_t>(want.size()), want) << "s=" << s << " n=" << n;
      EXPECT_EQ(flag.read<uint32_t>(1)[0], 0u) << "s=" << s << " n=" << n;
      if (n == 0) continue;
      // One value just outside the levels, first, last or anywhere (s = 127: only −128 is outside).
      for (int outside : {s + 1, -s - 1}) {
        if (outside > 127) continue;
        for (size_t at : {size_t(0), n - 1, size_t(rng()() % n)}) {
          auto bad = q;
          bad[at] = int8_t(outside);
          ASSERT_FALSE(levels_within(bad.data(), n, s));
          DeviceBuffer dbad(bad, off);
          finish(cuda::pack_levels(static_cast<const int8_t*>(dbad.get()), n, s, dout.words(), flag_word, nullptr));
          EXPECT_EQ(flag.read<uint32_t>(1)[0], 1u) << "s=" << s << " n=" << n << " q[" << at << "]=" << outside;
        }
      }
    }
  }
  for (int s : {0, 128, -1}) {
    EXPECT_EQ(cuda::pack_levels(nullptr, 0, s, nullptr, flag_word, nullptr), cudaErrorInvalidValue) << s;
  }
}

// Random counts of up to max_count as a counter of `planes` planes.
std::vector<uint64_t> random_counter(size_t n, int planes, int64_t max_count) {
  std::vector<int32_t> values(n);
  for (auto& v : values) v = int32_t(rng()() % uint64_t(max_count + 1));
  return encode_counter(values, planes);
}

TEST_P(CudaKernels, UnpackMeanMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloats) {
    // Planes 1 to 11 (binary and ternary counts of these N), each of the kernel's instances for a
    // fixed plane count (1 to kFixedCountPlanes = 8) and the run-time one with its table (9 to 11);
    // 2500 ranks: 12 and 13 planes, past the shared-memory table, so it divides per element.
    for (int64_t nranks : {1, 3, 4, 7, 12, 40, 100, 200, 1000, 2500}) {
      for (bool ternary : {false, true}) {
        const int planes = planes_for(ternary ? 2 * nranks : nranks);
        const int scale = ternary ? 1 : 2;
        for (size_t n : {size_t(1), size_t(65), size_t(100003)}) {
          const auto count = random_counter(n, planes, ternary ? 2 * nranks : nranks);
          std::vector<uint8_t> want(n * dtype_size(dtype));
          unpack_mean(count.data(), planes, n, scale, nranks, nranks, want.data(), dtype);
          DeviceBuffer dc(count), dy(nullptr, want.size(), offset(dtype));
          finish(cuda::unpack_mean(dc.words(), planes, n, scale, nranks, nranks, dy.get(), dtype, nullptr));
          EXPECT_EQ(dy.read<uint8_t>(want.size()), want) << dtype_name(dtype) << " N=" << nranks << " n=" << n;
        }
      }
    }
  }
}

TEST_P(CudaKernels, ApplyVoteAndMeanMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloats) {
    for (size_t n : gpu_lengths()) {
      const auto x0 = random_values(dtype, n);
      const auto pos = random_plane(n, 0.45), tie = random_plane(n, 0.2);
      for (double wd : {0.0, 0.1}) {
        auto want = x0;
        apply_vote(want.data(), dtype, n, pos.data(), tie.data(), 3e-4, wd);
        DeviceBuffer dx(x0, offset(dtype)), dpos(pos), dtie(tie);
        finish(cuda::apply_vote(dx.get(), dtype, n, dpos.words(), dtie.words(), 3e-4, wd, nullptr));
        expect_same_elements(dtype, want, dx.read<uint8_t>(want.size()), "apply_vote n=" + std::to_string(n));
      }
      // 1 to 1500 ranks: 1 to 11 planes, the instances for a fixed plane count (up to 8) and the
      // run-time one with its shared-memory table of means; 2500 (12 planes): past it, a division each.
      // Binary counts (scale 2: the mean is 2u/N - 1) and ternary ones (scale 1, counts to 2N: u/N - 1).
      for (int64_t nranks : {1, 2, 5, 12, 20, 40, 100, 200, 300, 1000, 1500, 2500}) {
        for (bool ternary : {false, true}) {
          const int64_t most = ternary ? 2 * nranks : nranks;
          const int planes = planes_for(most), scale = ternary ? 1 : 2;
          const auto count = random_counter(n, planes, most);
          auto want = x0;
          apply_mean(want.data(), dtype, n, count.data(), planes, scale, nranks, nranks, 1e-3, 0.01);
          DeviceBuffer dx(x0, offset(dtype)), dc(count);
          finish(cuda::apply_mean(dx.get(), dtype, n, dc.words(), planes, scale, nranks, nranks, 1e-3, 0.01, nullptr));
          expect_same_elements(dtype, want, dx.read<uint8_t>(want.size()),
                               std::string(ternary ? "ternary" : "binary") + " apply_mean N=" + std::to_string(nranks) +
                                   " n=" + std::to_string(n));
        }
      }
    }
  }
}

TEST_P(CudaKernels, LionVoteMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloats) {
    for (size_t n : gpu_lengths()) {
      const auto g = random_values(dtype, n), m0 = random_values(dtype, n);
      const size_t W = words_for(n);
      auto m = m0;
      std::vector<uint64_t> pos(W), neg(W);
      lion_vote(g.data(), m.data(), dtype, n, 0.9, 0.99, pos.data(), neg.data());
      DeviceBuffer dg(g, offset(dtype)), dm(m0, offset(dtype)), dpos(nullptr, W * 8), dneg(nullptr, W * 8);
      finish(cuda::lion_vote(dg.get(), dm.get(), dtype, n, 0.9, 0.99, dpos.words(), dneg.words(), nullptr));
      const auto got_m = dm.read<uint8_t>(m.size());
      expect_same_elements(dtype, m, got_m, "lion_vote momentum n=" + std::to_string(n));
      EXPECT_EQ(dpos.read<uint64_t>(W), pos) << dtype_name(dtype) << " n=" << n;
      EXPECT_EQ(dneg.read<uint64_t>(W), neg) << dtype_name(dtype) << " n=" << n;
      // element_math.cuh widens and rounds fp16 NaNs without keeping their bits, on the ground that the
      // GPU's float32 arithmetic returns its canonical (positive) NaN whatever comes in, so that every
      // NaN momentum, negative inputs included, comes out as narrow()'s 0x7E00. Checked here.
      if (dtype == DType::kFloat16) {
        for (size_t i = 0; i < n; ++i) {
          uint16_t bits;
          std::memcpy(&bits, got_m.data() + 2 * i, 2);
          if ((bits & 0x7FFFu) > 0x7C00u) ASSERT_EQ(bits, 0x7E00u) << "fp16 NaN momentum, element " << i << " n=" << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Alignment, CudaKernels, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Unaligned" : "Aligned"; });

TEST(CudaCounters, CountPlanesMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  // 255 and 256 planes of ones: the largest counts, which need every digit the kernel keeps (9 at 256).
  for (int nplanes : {0, 1, 2, 3, 4, 5, 7, 8, 16, 33, 100, 255, 256}) {
    for (size_t n : {size_t(1), size_t(64), size_t(70001)}) {
      const size_t W = words_for(n);
      std::vector<std::vector<uint64_t>> planes;
      std::vector<const uint64_t*> host_ptrs;
      for (int k = 0; k < nplanes; ++k) planes.push_back(random_plane(n, nplanes >= 255 ? 1.0 : 0.5));
      for (const auto& p : planes) host_ptrs.push_back(p.data());
      // One spare plane must come out zero; with 3 planes, 32 counter planes (the most) too.
      const int counter_planes = nplanes == 3 ? 32 : planes_for(nplanes) + 1;
      std::vector<uint64_t> want(size_t(counter_planes) * W);
      count_planes(host_ptrs.data(), nplanes, W, want.data(), counter_planes);
      std::vector<std::unique_ptr<DeviceBuffer>> dplanes;
      std::vector<const uint64_t*> dev_ptrs;
      for (const auto& p : planes) {
        dplanes.push_back(std::make_unique<DeviceBuffer>(p));
        dev_ptrs.push_back(dplanes.back()->words());
      }
      DeviceBuffer dcounter(nullptr, want.size() * 8);
      finish(cuda::count_planes(dev_ptrs.data(), nplanes, W, dcounter.words(), counter_planes, nullptr));
      EXPECT_EQ(dcounter.read<uint64_t>(want.size()), want) << "N=" << nplanes << " n=" << n;
    }
  }
}

TEST(CudaTrits, EncodeAndDecodeMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (size_t nwords : {size_t(1), size_t(4), size_t(5), size_t(7), size_t(1093)}) {
    const size_t n = nwords * 64;
    std::vector<uint64_t> pos = random_plane(n, 0.4), tie = random_plane(n, 0.3);
    for (size_t w = 0; w < nwords; ++w) tie[w] &= ~pos[w];  // as finalize writes them
    const size_t nbytes = trits::bytes_for_words(nwords);
    std::vector<uint8_t> want(nbytes);
    encode_trits(pos.data(), tie.data(), nwords, want.data());
    DeviceBuffer dpos(pos), dtie(tie), dbytes(nullptr, nbytes, 1);  // odd byte offset: no alignment assumed
    finish(cuda::encode_trits(dpos.words(), dtie.words(), nwords, static_cast<uint8_t*>(dbytes.get()), nullptr));
    EXPECT_EQ(dbytes.read<uint8_t>(nbytes), want) << "encode, nwords " << nwords;
    DeviceBuffer dpos2(nullptr, nwords * 8), dtie2(nullptr, nwords * 8);  // poisoned
    finish(cuda::decode_trits(static_cast<const uint8_t*>(dbytes.get()), nwords, dpos2.words(), dtie2.words(), nullptr));
    EXPECT_EQ(dpos2.read<uint64_t>(nwords), pos) << "decode pos, nwords " << nwords;
    EXPECT_EQ(dtie2.read<uint64_t>(nwords), tie) << "decode tie, nwords " << nwords;
  }
}

TEST(CudaPackedCounts, EncodeAndDecodeMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  // Powers of two (2: 32 counts a limb; 4: N = 3's binary mean) among them; 4097 and 5001 take the
  // definition's decoder (13 planes), the others decode_counts_of_kernel<R>.
  for (uint32_t base : {2u, 3u, 4u, 5u, 9u, 17u, 33u, 1025u, 4096u, 4097u, 5001u}) {
    const counts::CountCode code = counts::make_code(base);
    std::vector<size_t> sizes{1, 3, 13, 1093};
    if (base == 5) sizes.push_back(300007);  // past one pass of the grid-stride loops
    for (size_t nwords : sizes) {
      const size_t stride = nwords + 2, R = size_t(code.planes);
      std::vector<uint64_t> planes(R * stride, 0);
      std::mt19937_64 rng(base * 31 + nwords);
      for (size_t e = 0; e < nwords * 64; ++e) {  // every element a count below the base
        const uint64_t count = rng() % base;
        for (size_t p = 0; p < R; ++p) planes[p * stride + e / 64] |= ((count >> p) & 1u) << (e % 64);
      }
      const size_t nlimbs = counts::limbs_for_words(code, nwords);
      std::vector<uint32_t> want(nlimbs);
      encode_counts(code, planes.data(), stride, nwords, want.data());
      DeviceBuffer dplanes(planes), dlimbs(nullptr, nlimbs * 4);
      finish(cuda::encode_counts(code, dplanes.words(), stride, nwords, static_cast<uint32_t*>(dlimbs.get()), nullptr));
      EXPECT_EQ(dlimbs.read<uint32_t>(nlimbs), want) << "encode, base " << base << " nwords " << nwords;
      std::vector<uint64_t> poison(R * stride, 0x5A5A5A5A5A5A5A5Aull);
      for (size_t i = 0; i < poison.size(); ++i) {
        if (i % stride >= nwords) poison[i] = planes[i];
      }
      DeviceBuffer dout(poison);  // the gaps between the planes must keep their words
      finish(cuda::decode_counts(code, static_cast<const uint32_t*>(dlimbs.get()), nwords, dout.words(), stride, nullptr));
      EXPECT_EQ(dout.read<uint64_t>(R * stride), planes) << "decode, base " << base << " nwords " << nwords;
    }
  }
}

TEST(CudaPackedCounts, ACodeNotMadeByMakeCodeIsRefused) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer dplanes(std::vector<uint64_t>(64, 0)), dlimbs(nullptr, 64 * 4);
  counts::CountCode no_magic = counts::make_code(5);
  no_magic.magic = 0;
  counts::CountCode too_many_planes = counts::make_code(5);
  too_many_planes.planes = 40;
  for (const counts::CountCode& code : {counts::CountCode{}, no_magic, too_many_planes}) {
    EXPECT_EQ(cuda::encode_counts(code, dplanes.words(), 1, 1, static_cast<uint32_t*>(dlimbs.get()), nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda::decode_counts(code, static_cast<const uint32_t*>(dlimbs.get()), 1, dplanes.words(), 1, nullptr),
              cudaErrorInvalidValue);
  }
}

TEST(CudaCounters, ThresholdsAndSignedOffsetMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t nvotes : {1, 2, 3, 4, 7, 8, 31}) {
    const size_t n = 10007, W = words_for(n);
    const int planes = planes_for(nvotes);
    const auto count = random_counter(n, planes, nvotes);
    std::vector<uint64_t> pos(W), tie(W);
    vote_from_count(count.data(), planes, W, nvotes, pos.data(), tie.data());
    DeviceBuffer dc(count), dpos(nullptr, W * 8), dtie(nullptr, W * 8);
    finish(cuda::vote_from_count(dc.words(), planes, W, nvotes, dpos.words(), dtie.words(), nullptr));
    EXPECT_EQ(dpos.read<uint64_t>(W), pos) << "vote_from_count N=" << nvotes;
    EXPECT_EQ(dtie.read<uint64_t>(W), tie) << "vote_from_count N=" << nvotes;

    const auto pc = random_counter(n, planes, nvotes), nc = random_counter(n, planes, nvotes);
    vote_from_counts(pc.data(), nc.data(), planes, W, pos.data(), tie.data());
    DeviceBuffer dpc(pc), dnc(nc);
    finish(cuda::vote_from_counts(dpc.words(), dnc.words(), planes, W, dpos.words(), dtie.words(), nullptr));
    EXPECT_EQ(dpos.read<uint64_t>(W), pos) << "vote_from_counts N=" << nvotes;
    EXPECT_EQ(dtie.read<uint64_t>(W), tie) << "vote_from_counts N=" << nvotes;

    const int out_planes = planes_for(2 * nvotes);
    std::vector<uint64_t> out(size_t(out_planes) * W);
    counter_signed_offset(pc.data(), nc.data(), planes, W, nvotes, out.data(), out_planes);
    DeviceBuffer dout(nullptr, out.size() * 8);
    finish(cuda::counter_signed_offset(dpc.words(), dnc.words(), planes, W, nvotes, dout.words(), out_planes, 0, nullptr));
    EXPECT_EQ(dout.read<uint64_t>(out.size()), out) << "counter_signed_offset N=" << nvotes;
    // Planes a stride apart, the words between them untouched: as the CPU kernel writes them.
    const size_t stride = W + 5;
    std::vector<uint64_t> strided(size_t(out_planes) * stride, 0xA5A5A5A5A5A5A5A5ull);
    DeviceBuffer dstrided(strided);
    counter_signed_offset(pc.data(), nc.data(), planes, W, nvotes, strided.data(), out_planes, stride);
    finish(cuda::counter_signed_offset(dpc.words(), dnc.words(), planes, W, nvotes, dstrided.words(), out_planes,
                                       stride, nullptr));
    EXPECT_EQ(dstrided.read<uint64_t>(strided.size()), strided) << "counter_signed_offset strided N=" << nvotes;
  }
}

// Several tensors in one flat index space (each starting on a 64-element boundary), cut into slices
// as the optimizer does: the multi-tensor kernels give each tensor what the single-tensor CPU kernels give.
TEST(CudaSlices, LionVoteAndApplyOverManyTensorsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<size_t> sizes = {1, 63, 64, 65, 70000, 200003, 5};
  for (DType dtype : kFloats) {
    const size_t es = dtype_size(dtype);
    std::vector<std::vector<uint8_t>> g, m, x;
    std::vector<std::unique_ptr<DeviceBuffer>> dg, dm, dx;
    std::vector<size_t> starts;
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      g.push_back(random_values(dtype, sizes[i]));
      m.push_back(random_values(dtype, sizes[i]));
      x.push_back(random_values(dtype, sizes[i]));
      const size_t off = i % 2 ? es : 0;  // every other tensor unaligned
      dg.push_back(std::make_unique<DeviceBuffer>(g.back(), off));
      dm.push_back(std::make_unique<DeviceBuffer>(m.back(), off));
      dx.push_back(std::make_unique<DeviceBuffer>(x.back(), off));
      starts.push_back(total);
      total += (sizes[i] + 63) / 64 * 64;
    }
    const size_t W = words_for(total);
    std::vector<cuda::TensorSlice> lion, apply;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t first = 0; first < sizes[i]; first += cuda::kSliceElements) {
        const uint32_t count = uint32_t(std::min<size_t>(cuda::kSliceElements, sizes[i] - first));
        const bool aligned = i % 2 == 0;
        const uint64_t word = (starts[i] + first) / 64;
        lion.push_back({static_cast<char*>(dg[i]->get()) + first * es, static_cast<char*>(dm[i]->get()) + first * es,
                        word, count, aligned});
        apply.push_back({nullptr, static_cast<char*>(dx[i]->get()) + first * es, word, count, aligned});
      }
    }
    DeviceBuffer dlion(lion), dapply(apply), dpos(nullptr, W * 8), dneg(nullptr, W * 8);
    finish(cuda::lion_vote_slices(static_cast<cuda::TensorSlice*>(dlion.get()), lion.size(), dtype, 0.9, 0.99,
                                  dpos.words(), dneg.words(), nullptr));
    const auto pos = dpos.read<uint64_t>(W), neg = dneg.read<uint64_t>(W);
    finish(cuda::apply_vote_slices(static_cast<cuda::TensorSlice*>(dapply.get()), apply.size(), dtype, dpos.words(),
                                   dneg.words(), 1e-3, 0.1, nullptr));
    // Then three means in turn: 2 planes (an instance for a fixed count), 9 (the run-time one with its
    // table of means) and 12 (past the table: a division each).
    const std::vector<int64_t> mean_ranks = {3, 300, 2500};
    std::vector<std::vector<uint64_t>> counts;
    for (int64_t nranks : mean_ranks) {
      const int planes = planes_for(nranks);
      counts.push_back(random_counter(total, planes, nranks));
      DeviceBuffer dcount(counts.back());
      finish(cuda::apply_mean_slices(static_cast<cuda::TensorSlice*>(dapply.get()), apply.size(), dtype,
                                     dcount.words(), planes, W, 2, nranks, nranks, 1e-3, 0.1, nullptr));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t n = sizes[i], w0 = starts[i] / 64, nw = words_for(n);
      auto mi = m[i];
      std::vector<uint64_t> p(nw), q(nw);
      lion_vote(g[i].data(), mi.data(), dtype, n, 0.9, 0.99, p.data(), q.data());
      expect_same_elements(dtype, mi, dm[i]->read<uint8_t>(mi.size()), "momentum of tensor " + std::to_string(i));
      EXPECT_EQ(std::vector<uint64_t>(pos.begin() + long(w0), pos.begin() + long(w0 + nw)), p) << "tensor " << i;
      EXPECT_EQ(std::vector<uint64_t>(neg.begin() + long(w0), neg.begin() + long(w0 + nw)), q) << "tensor " << i;
      // Apply: vote from the slices' own pos/neg planes as +1 plane and tie plane, then the means.
      auto xi = x[i];
      apply_vote(xi.data(), dtype, n, p.data(), q.data(), 1e-3, 0.1);
      for (size_t c = 0; c < mean_ranks.size(); ++c) {
        const int64_t nranks = mean_ranks[c];
        const int planes = planes_for(nranks);
        std::vector<uint64_t> piece(size_t(planes) * nw);
        for (int k = 0; k < planes; ++k) {
          std::copy_n(counts[c].begin() + long(size_t(k) * W + w0), nw, piece.begin() + long(size_t(k) * nw));
        }
        apply_mean(xi.data(), dtype, n, piece.data(), planes, 2, nranks, nranks, 1e-3, 0.1);
      }
      expect_same_elements(dtype, xi, dx[i]->read<uint8_t>(xi.size()), "parameters of tensor " + std::to_string(i));
    }
  }
}

// A world of one's step in one pass (lion_local_slices) against the CPU's three stages with one rank:
// lion_vote packs the update's signs, one rank's vote is its own (a majority of one; with ternary votes
// an element that packed neither bit is a tie), and apply_vote applies it. Every other tensor unaligned;
// random values include ±0, NaN and inf, so c is 0 or NaN somewhere and the binary/ternary rule shows.
TEST(CudaSlices, LocalLionStepEqualsOneRanksVoteApplied) {
  SKIP_WITHOUT_GPU();
  struct Hyper {
    double lr, wd, beta1, beta2;
  };
  const std::vector<size_t> sizes = {1, 63, 64, 65, 70000, 200003, 5};
  for (DType dtype : kFloats) {
    for (bool ternary : {false, true}) {
      for (const Hyper& h : {Hyper{1e-3, 0.1, 0.9, 0.99}, Hyper{0.3, 0.0, 0.5, 0.999}}) {
        const size_t es = dtype_size(dtype);
        std::vector<std::vector<uint8_t>> g, m, x;
        std::vector<std::unique_ptr<DeviceBuffer>> dg, dm, dx;
        std::vector<cuda::LocalSlice> slices;
        for (size_t i = 0; i < sizes.size(); ++i) {
          g.push_back(random_values(dtype, sizes[i]));
          m.push_back(random_values(dtype, sizes[i]));
          x.push_back(random_values(dtype, sizes[i]));
          // Every other tensor unaligned, and in tensor 2 only the parameters (the slice's flag is all three's).
          const size_t off = i % 2 ? es : 0, x_off = i == 2 ? es : off;
          dg.push_back(std::make_unique<DeviceBuffer>(g.back(), off));
          dm.push_back(std::make_unique<DeviceBuffer>(m.back(), off));
          dx.push_back(std::make_unique<DeviceBuffer>(x.back(), x_off));
          for (size_t first = 0; first < sizes[i]; first += cuda::kSliceElements) {
            const uint32_t count = uint32_t(std::min<size_t>(cuda::kSliceElements, sizes[i] - first));
            slices.push_back({static_cast<char*>(dg[i]->get()) + first * es,
                              static_cast<char*>(dm[i]->get()) + first * es,
                              static_cast<char*>(dx[i]->get()) + first * es, count, uint32_t(off == 0 && x_off == 0)});
          }
        }
        DeviceBuffer dslices(slices);
        finish(cuda::lion_local_slices(static_cast<cuda::LocalSlice*>(dslices.get()), slices.size(), dtype, h.beta1,
                                       h.beta2, ternary, h.lr, h.wd, nullptr));
        for (size_t i = 0; i < sizes.size(); ++i) {
          const size_t n = sizes[i], nw = words_for(n);
          auto mi = m[i], xi = x[i];
          std::vector<uint64_t> pos(nw), neg(nw), tie(nw);
          lion_vote(g[i].data(), mi.data(), dtype, n, h.beta1, h.beta2, pos.data(), ternary ? neg.data() : nullptr);
          for (size_t w = 0; w < nw; ++w) tie[w] = ~(pos[w] | neg[w]);  // voted neither way: a tie of one
          apply_vote(xi.data(), dtype, n, pos.data(), ternary ? tie.data() : nullptr, h.lr, h.wd);
          const std::string what = std::string(ternary ? "ternary" : "binary") + " lr " + std::to_string(h.lr) +
                                   ", tensor " + std::to_string(i);
          // Read 16 bytes past each tensor too: the poison there must be untouched.
          const auto got_m = dm[i]->read<uint8_t>(mi.size() + 16), got_x = dx[i]->read<uint8_t>(xi.size() + 16);
          expect_same_elements(dtype, mi, std::vector<uint8_t>(got_m.begin(), got_m.end() - 16), "momentum, " + what);
          expect_same_elements(dtype, xi, std::vector<uint8_t>(got_x.begin(), got_x.end() - 16), "parameters, " + what);
          const std::vector<uint8_t> poison(16, 0xA5);
          EXPECT_EQ(std::vector<uint8_t>(got_m.end() - 16, got_m.end()), poison) << "past the momentum, " << what;
          EXPECT_EQ(std::vector<uint8_t>(got_x.end() - 16, got_x.end()), poison) << "past the parameters, " << what;
        }
      }
    }
  }
}

// The helpers that let an optimizer bucket switch to ternary votes on the device, element by element
// against the definition: an abstention is an element of a slice with neither bit; binary as ternary
// keeps pos and sets neg = not pos on the slices' elements, and leaves other words alone.
// The 1-bit compression of the compressed allreduce: signs, errors, averages and expansions are the CPU
// kernels' bits (NaN as NaN); sums of squares agree to double rounding (a different order).
TEST(CudaOnebit, CompressionsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (size_t n : lengths()) {
    auto bytes = random_values(DType::kFloat32, n);
    std::vector<float> x(n), error(n);
    std::memcpy(x.data(), bytes.data(), n * 4);
    const auto err_bytes = random_values(DType::kFloat32, n);
    std::memcpy(error.data(), err_bytes.data(), n * 4);
    for (size_t i = 0; i < n; ++i) {  // values whose sum and squares stay finite, so the sums compare
      if (!std::isfinite(x[i]) || std::fabs(x[i]) > 1e30f) x[i] = float(i % 5) - 2.0f;
      if (!std::isfinite(error[i]) || std::fabs(error[i]) > 1e30f) error[i] = 0.5f;
    }
    // add_error_and_square_sum
    std::vector<float> cpu_x = x;
    const double cpu_sum = add_error_and_square_sum(cpu_x.data(), error.data(), n);
    DeviceBuffer dx(x), derr(error), sums(nullptr, (cuda::kSquareSumBlocks + 1) * sizeof(double));
    auto* s = static_cast<double*>(sums.get());
    finish(cuda::add_error_and_square_sum(static_cast<float*>(dx.get()), static_cast<const float*>(derr.get()), n, s,
                                          s + cuda::kSquareSumBlocks, nullptr));
    ASSERT_EQ(std::memcmp(dx.read<float>(n).data(), cpu_x.data(), n * 4), 0) << "x + error, n=" << n;
    const double gpu_sum = sums.read<double>(cuda::kSquareSumBlocks + 1)[cuda::kSquareSumBlocks];
    EXPECT_NEAR(gpu_sum, cpu_sum, 1e-10 * cpu_sum + 1e-300) << "n=" << n;  // positive terms: (n − 1)·ε at worst
    // compress_signs: signs and the new error, with ±0 and NaN among the inputs
    std::memcpy(x.data(), bytes.data(), n * 4);
    const float scale = 0.75f;
    std::vector<uint64_t> cpu_signs(words_for(n));
    std::vector<float> cpu_error(n);
    compress_signs(x.data(), scale, n, cpu_signs.data(), cpu_error.data());
    DeviceBuffer dy(x), dsigns(nullptr, words_for(n) * 8), derr2(nullptr, n * 4);
    finish(cuda::compress_signs(static_cast<const float*>(dy.get()), scale, n, dsigns.words(),
                                static_cast<float*>(derr2.get()), nullptr));
    ASSERT_EQ(dsigns.read<uint64_t>(words_for(n)), cpu_signs) << "signs, n=" << n;
    std::vector<uint8_t> want(n * 4), got(n * 4);
    std::memcpy(want.data(), cpu_error.data(), n * 4);
    const auto gpu_error = derr2.read<float>(n);
    std::memcpy(got.data(), gpu_error.data(), n * 4);
    expect_same_elements(DType::kFloat32, want, got, "compress error");
    // average_signs over three sign vectors, then expand_signs
    const auto a = random_plane(n), b = random_plane(n), c = random_plane(n);
    const uint64_t* host_planes[3] = {a.data(), b.data(), c.data()};
    const float scales[3] = {0.5f, 1.25f, 3.0f};
    std::vector<float> cpu_average(n);
    average_signs(host_planes, scales, 3, n, cpu_average.data());
    DeviceBuffer da(a), db(b), dc(c), dout(nullptr, n * 4);
    const uint64_t* device_planes[3] = {da.words(), db.words(), dc.words()};
    finish(cuda::average_signs(device_planes, scales, 3, n, static_cast<float*>(dout.get()), nullptr));
    ASSERT_EQ(std::memcmp(dout.read<float>(n).data(), cpu_average.data(), n * 4), 0) << "average, n=" << n;
    std::vector<float> cpu_expanded(n);
    expand_signs(a.data(), -2.5f, n, cpu_expanded.data());
    finish(cuda::expand_signs(da.words(), -2.5f, n, static_cast<float*>(dout.get()), nullptr));
    ASSERT_EQ(std::memcmp(dout.read<float>(n).data(), cpu_expanded.data(), n * 4), 0) << "expand, n=" << n;
  }
}

std::vector<float> random_floats(size_t n) {
  const auto bytes = random_values(DType::kFloat32, n);
  std::vector<float> out(n);
  std::memcpy(out.data(), bytes.data(), n * 4);
  return out;
}

// A variance: non-negative, some exact zeros.
std::vector<float> random_variance(size_t n) {
  auto v = random_floats(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? 0.0f : std::fabs(v[i]);
  return v;
}

void expect_same_floats(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  std::vector<uint8_t> a(want.size() * 4), b(got.size() * 4);
  std::memcpy(a.data(), want.data(), a.size());
  std::memcpy(b.data(), got.data(), b.size());
  expect_same_elements(DType::kFloat32, a, b, what);
}

// 1-bit Adam's and 0/1 Adam's fused steps: the CUDA kernels give the CPU kernels' bits (NaN as NaN) for
// every dtype and every combination of switches.
TEST(CudaCompressedAdam, FusedStepsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const size_t w = dtype_size(dtype);
    for (size_t n : short_lengths()) {
      for (int variant = 0; variant < 16; ++variant) {
        const bool has_grad = variant & 1, decay = variant & 2, bias = variant & 4, flag = variant & 8;
        const std::string where = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) + " variant=" +
                                  std::to_string(variant);
        const auto p0 = random_values(dtype, n), g = random_values(dtype, n);
        const auto m0 = random_floats(n), acc0 = random_floats(n), v = random_variance(n), mean = random_floats(n);
        const auto anchor0 = random_floats(n);
        AdamLocalStep step;
        step.lr = 3e-3;
        step.beta1 = variant % 3 == 0 ? 0.3 : 0.9;
        step.eps = 1e-6;
        step.weight_decay = decay ? 0.1 : 0.0;
        step.bias_correction = bias;
        step.step_size = bias ? 0.0061 : step.lr;
        step.bias_correction2_sqrt = bias ? 0.0707 : 1.0;
        // 0/1 Adam's local step (with and without the synchronisation's output)
        auto p = p0;
        auto m = m0, acc = acc0;
        std::vector<float> scaled(n, -7.0f);
        zero_one_adam_local_step(p.data(), has_grad ? g.data() : nullptr, dtype, m.data(), v.data(), acc.data(), n,
                                 step, flag ? scaled.data() : nullptr);
        DeviceBuffer dp(p0), dg(g), dm(m0), dv(v), dacc(acc0), dscaled(std::vector<float>(n, -7.0f));
        finish(cuda::zero_one_adam_local_step(dp.get(), has_grad ? dg.get() : nullptr, dtype,
                                              static_cast<float*>(dm.get()), static_cast<const float*>(dv.get()),
                                              static_cast<float*>(dacc.get()), n, step,
                                              flag ? static_cast<float*>(dscaled.get()) : nullptr, nullptr));
        expect_same_elements(dtype, p, dp.read<uint8_t>(n * w), "local p " + where);
        expect_same_floats(m, dm.read<float>(n), "local m " + where);
        expect_same_floats(acc, dacc.read<float>(n), "local acc " + where);
        expect_same_floats(scaled, dscaled.read<float>(n), "local scaled " + where);
        // 0/1 Adam's synchronisation
        AdamSync sync;
        sync.eps = 1e-6;
        sync.lr_sum = decay ? 0.0 : 0.0123;
        sync.mask_zero_variance = flag;
        p = p0;
        m = m0;
        acc = acc0;
        auto anchor = anchor0;
        zero_one_adam_sync(mean.data(), v.data(), m.data(), anchor.data(), acc.data(), p.data(), dtype, n, sync);
        DeviceBuffer dmean(mean), dp2(p0), dm2(m0), danchor(anchor0), dacc2(acc0);
        finish(cuda::zero_one_adam_sync(static_cast<const float*>(dmean.get()), static_cast<const float*>(dv.get()),
                                        static_cast<float*>(dm2.get()), static_cast<float*>(danchor.get()),
                                        static_cast<float*>(dacc2.get()), dp2.get(), dtype, n, sync, nullptr));
        expect_same_elements(dtype, p, dp2.read<uint8_t>(n * w), "sync p " + where);
        expect_same_floats(m, dm2.read<float>(n), "sync m " + where);
        expect_same_floats(anchor, danchor.read<float>(n), "sync anchor " + where);
        expect_same_floats(acc, dacc2.read<float>(n), "sync acc " + where);
        // 1-bit Adam's momentum and apply
        m = m0;
        std::vector<float> out(n, -7.0f);
        onebit_adam_momentum(has_grad ? g.data() : nullptr, dtype, m.data(), n, step.beta1, out.data());
        DeviceBuffer dm3(m0), dout(std::vector<float>(n, -7.0f));
        finish(cuda::onebit_adam_momentum(has_grad ? dg.get() : nullptr, dtype, static_cast<float*>(dm3.get()), n,
                                          step.beta1, static_cast<float*>(dout.get()), nullptr));
        expect_same_floats(m, dm3.read<float>(n), "momentum m " + where);
        expect_same_floats(out, dout.read<float>(n), "momentum out " + where);
        AdamApply apply;
        apply.lr = step.lr;
        apply.eps = step.eps;
        apply.weight_decay = step.weight_decay;
        apply.step_size = step.step_size;
        apply.bias_correction2_sqrt = step.bias_correction2_sqrt;
        apply.bias_correction = bias;
        apply.mask_zero_variance = flag;
        p = p0;
        m = m0;
        onebit_adam_apply(mean.data(), v.data(), m.data(), p.data(), dtype, n, apply);
        DeviceBuffer dp4(p0), dm4(m0);
        finish(cuda::onebit_adam_apply(static_cast<const float*>(dmean.get()), static_cast<const float*>(dv.get()),
                                       static_cast<float*>(dm4.get()), dp4.get(), dtype, n, apply, nullptr));
        expect_same_elements(dtype, p, dp4.read<uint8_t>(n * w), "apply p " + where);
        expect_same_floats(m, dm4.read<float>(n), "apply m " + where);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Tensors of the sizes given, one after the other in the flat index space as the optimizer lays them out.
void check_abstention_lists_and_binary_as_ternary(const std::vector<size_t>& sizes) {
  std::vector<cuda::TensorSlice> slices;
  std::vector<std::pair<size_t, size_t>> elements;  // (first element, count) of each slice in the flat space
  std::vector<size_t> last_slice_of_tensor;
  size_t total = 0;
  for (size_t n : sizes) {
    for (size_t first = 0; first < n; first += cuda::kSliceElements) {
      const uint32_t count = uint32_t(std::min<size_t>(cuda::kSliceElements, n - first));
      slices.push_back({nullptr, nullptr, (total + first) / 64, count, 1});
      elements.emplace_back(total + first, count);
    }
    last_slice_of_tensor.push_back(slices.size() - 1);
    total += (n + 63) / 64 * 64;
  }
  total += 128;  // two words that no slice covers
  const size_t W = words_for(total);
  auto bit = [](const std::vector<uint64_t>& plane, size_t j) { return (plane[j / 64] >> (j % 64)) & 1u; };
  // Votes as lion_vote_slices leaves them: every element +1 or −1, bits past a slice's end zero.
  std::vector<uint64_t> pos(W, 0), neg(W, 0);
  const auto random_bits = random_counter(W * 64, 1, 1);  // one random plane of W words
  for (const auto& [first, count] : elements) {
    for (size_t j = first; j < first + count; ++j) {
      if (bit(random_bits, j)) pos[j / 64] |= uint64_t{1} << (j % 64);
      else neg[j / 64] |= uint64_t{1} << (j % 64);
    }
  }
  DeviceBuffer dslices(slices);
  const auto* table = static_cast<const cuda::TensorSlice*>(dslices.get());
  // Abstentions: none, the last element of one tensor's last slice, or a random few in every slice (some
  // words with several); listed in full, or cut at a capacity that is smaller than their number.
  std::mt19937_64 rng(7);
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::vector<uint64_t> p = pos, q = neg;
    std::vector<uint32_t> want;
    for (size_t s = 0; s < elements.size(); ++s) {
      const auto [first, count] = elements[s];
      for (size_t j = first; j < first + count; ++j) {
        const bool abstains = pattern == 1 ? s == last_slice_of_tensor[3] && j == first + count - 1
                                           : pattern == 2 && rng() % 97 < 3;
        if (!abstains) continue;
        p[j / 64] &= ~(uint64_t{1} << (j % 64));
        q[j / 64] &= ~(uint64_t{1} << (j % 64));
        want.push_back(uint32_t(j));
      }
    }
    for (const size_t capacity : {want.size() + 5, want.size() / 2}) {
      const std::string where = "pattern " + std::to_string(pattern) + ", capacity " + std::to_string(capacity);
      DeviceBuffer dp(p), dq(q), dcount(std::vector<uint32_t>{0}), dlist(std::vector<uint32_t>(capacity + 1, 0));
      DeviceBuffer druns(std::vector<uint32_t>(2 * slices.size(), ~0u));
      finish(cuda::list_abstentions_slices(table, slices.size(), dp.words(), dq.words(),
                                           static_cast<uint32_t*>(dlist.get()), uint32_t(capacity),
                                           static_cast<uint32_t*>(dcount.get()), static_cast<uint32_t*>(druns.get()),
                                           nullptr));
      ASSERT_EQ(dcount.read<uint32_t>(1)[0], want.size()) << where;
      const std::vector<uint32_t> list = dlist.read<uint32_t>(std::min(capacity, want.size()));
      const std::vector<uint32_t> runs = druns.read<uint32_t>(2 * slices.size());
      if (capacity >= want.size()) {  // the runs in slice order: every abstention, ascending
        std::vector<uint32_t> got;
        for (size_t s = 0; s < slices.size(); ++s) {
          ASSERT_LE(size_t(runs[2 * s]) + runs[2 * s + 1], want.size()) << where << ", slice " << s;
          got.insert(got.end(), list.begin() + runs[2 * s], list.begin() + runs[2 * s] + runs[2 * s + 1]);
        }
        EXPECT_EQ(got, want) << where;
      } else {  // some of them, each once
        std::vector<uint32_t> got = list;
        std::sort(got.begin(), got.end());
        EXPECT_TRUE(std::adjacent_find(got.begin(), got.end()) == got.end()) << where;
        EXPECT_TRUE(std::includes(want.begin(), want.end(), got.begin(), got.end())) << where;
      }
      EXPECT_EQ(dlist.read<uint32_t>(capacity + 1)[capacity], 0u) << where << ": written past the capacity";
    }
  }
  // Binary as ternary: garbage in the negative plane and past the slices must not survive inside them.
  std::vector<uint64_t> garbage = random_counter(W * 64, 1, 1);
  DeviceBuffer dp(pos), dq(garbage);
  finish(cuda::binary_as_ternary_slices(table, slices.size(), dp.words(), dq.words(), nullptr));
  const auto p = dp.read<uint64_t>(W), q = dq.read<uint64_t>(W);
  std::vector<bool> covered(W * 64, false);
  for (const auto& [first, count] : elements) {
    for (size_t j = first; j < first + count; ++j) covered[j] = true;
  }
  for (const auto& s : slices) {  // whole words of the slices: elements get ±1, the rest of the word 0
    for (size_t w = s.word; w < s.word + (size_t{s.count} + 63) / 64; ++w) {
      for (size_t j = w * 64; j < w * 64 + 64; ++j) {
        const bool in = covered[j];
        ASSERT_EQ(bit(p, j), in ? bit(pos, j) : 0u) << "pos, element " << j;
        ASSERT_EQ(bit(q, j), in ? 1u - bit(pos, j) : 0u) << "neg, element " << j;
      }
    }
  }
  for (size_t w = W - 2; w < W; ++w) EXPECT_EQ(q[w], garbage[w]) << "a word outside every slice was written";
}

TEST(CudaSlices, AbstentionListsAndBinaryAsTernaryFollowTheirDefinition) {
  SKIP_WITHOUT_GPU();
  check_abstention_lists_and_binary_as_ternary({1, 63, 64, 65, 70000, 131073});
  if (HasFatalFailure()) return;
  // Far more slices than blocks (a few per multiprocessor): each block takes many slices in turn.
  std::vector<size_t> many;
  for (size_t k = 0; k < 3000; ++k) many.push_back(1 + k * 37 % 200);
  check_abstention_lists_and_binary_as_ternary(many);
}

TEST(CudaRevote, GatherAndScatterTheBitsOfListedElements) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  for (const size_t n : {size_t{1}, size_t{64}, size_t{1000}, size_t{70001}}) {
    const size_t W = words_for(n);
    const auto pos = random_counter(W * 64, 1, 1), neg = random_counter(W * 64, 1, 1);  // random bits
    for (const unsigned every : {1u, 5u, 300u}) {  // dense (whole words), a few per word, sparse
      std::vector<uint32_t> at;
      for (size_t j = 0; j < n; ++j) {
        if (rng() % every == 0) at.push_back(uint32_t(j));
      }
      const size_t m = at.size(), mw = words_for(m);
      const std::string where = "n " + std::to_string(n) + ", every " + std::to_string(every);
      auto bit = [](const std::vector<uint64_t>& plane, size_t offset, size_t j) {
        return (plane[offset + j / 64] >> (j % 64)) & 1u;
      };
      // Gather: bit k of each output plane is the input plane's bit at at[k].
      DeviceBuffer dpos(pos), dneg(neg), dat(at), dout(std::vector<uint64_t>(2 * mw + 1, 0));
      finish(cuda::gather_vote_bits(dpos.words(), dneg.words(), static_cast<const uint32_t*>(dat.get()), m,
                                    dout.words(), nullptr));
      const auto out = dout.read<uint64_t>(2 * mw);
      for (size_t k = 0; k < m; ++k) {
        ASSERT_EQ(bit(out, 0, k), bit(pos, 0, at[k])) << where << ", +1 bit " << k;
        ASSERT_EQ(bit(out, mw, k), bit(neg, 0, at[k])) << where << ", -1 bit " << k;
      }
      if (m % 64 != 0) {  // bits past m are zero
        EXPECT_EQ(out[mw - 1] >> (m % 64), 0u) << where;
        EXPECT_EQ(out[2 * mw - 1] >> (m % 64), 0u) << where;
      }
      // Scatter into three planes: the listed bits take the values, every other bit keeps its own.
      const int nplanes = 3;
      const auto planes = random_counter(W * 64, nplanes, 7);  // random bits: nplanes planes of W words
      const auto values = random_counter(std::max<size_t>(mw, 1) * 64, nplanes, 7);
      std::vector<uint64_t> want = planes;
      for (int p = 0; p < nplanes; ++p) {
        for (size_t k = 0; k < m; ++k) {
          const uint64_t mask = uint64_t{1} << (at[k] % 64);
          uint64_t& w = want[size_t(p) * W + at[k] / 64];
          w = bit(values, size_t(p) * std::max<size_t>(mw, 1), k) ? (w | mask) : (w & ~mask);
        }
      }
      // values as the kernel reads them: plane p at p * mw
      std::vector<uint64_t> packed(size_t(nplanes) * mw);
      for (int p = 0; p < nplanes; ++p) {
        std::copy_n(values.begin() + std::ptrdiff_t(size_t(p) * std::max<size_t>(mw, 1)), mw,
                    packed.begin() + std::ptrdiff_t(size_t(p) * mw));
      }
      DeviceBuffer dplanes(planes), dvalues(packed);
      finish(cuda::scatter_plane_bits(dplanes.words(), nplanes, W, static_cast<const uint32_t*>(dat.get()), m,
                                      dvalues.words(), nullptr));
      EXPECT_EQ(dplanes.read<uint64_t>(size_t(nplanes) * W), want) << where;
    }
  }
}

}  // namespace
}  // namespace pride::bits::test
