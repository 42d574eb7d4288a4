// The fused Lion update against the formula spelled out in float32, one rounding per operation.
#include <cstring>

#include "oracle.h"

namespace pride::bits::test {
namespace {

using ApplyTest = IsaTest;

const DType kFloatTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

struct Hyper {
  double lr, wd;
};
const Hyper kHypers[] = {{1e-4, 0.0}, {3e-3, 0.1}, {0.5, 1.0}, {1.0, 0.0}};

// x1 = round(x * float(1 - lr*wd)), x2 = round(x1 - lr_d * delta), in dtype, where lr_d is float(lr)
// rounded to the dtype (torch rounds add_'s alpha to the tensor's dtype; mul_'s scalar it does not).
void expected_update(DType dtype, uint8_t* x, size_t j, float delta, const Hyper& h) {
  const float factor = static_cast<float>(1.0 - h.lr * h.wd);
  store_float(dtype, to_float(dtype, x, j) * factor, x, j);
  uint8_t lr_d[4];
  store_float(dtype, static_cast<float>(h.lr), lr_d, 0);
  const float step = to_float(dtype, lr_d, 0) * delta;
  store_float(dtype, to_float(dtype, x, j) - step, x, j);
}

TEST_P(ApplyTest, Vote) {
  for (DType dtype : kFloatTypes) {
    for (const Hyper& h : kHypers) {
      for (size_t n : lengths()) {
        const auto pos = random_plane(n);
        const auto tie = random_plane(n, 0.3);
        auto x = random_values(dtype, n);
        auto expected = x;
        apply_vote(x.data(), dtype, n, pos.data(), tie.data(), h.lr, h.wd);
        for (size_t j = 0; j < n; ++j) {
          const float delta = bit(pos.data(), j) ? 1.0f : bit(tie.data(), j) ? 0.0f : -1.0f;
          expected_update(dtype, expected.data(), j, delta, h);
          expect_same_value(dtype, expected.data(), x.data(), j, "apply_vote");
        }
      }
    }
  }
}

TEST_P(ApplyTest, Mean) {
  for (DType dtype : kFloatTypes) {
    for (int nranks : {1, 3, 4, 7, 8, 15, 16, 31, 64}) {  // 1 … 7 planes: 4 and 5 take the AVX2 table's blends
      for (size_t n : short_lengths()) {
        const Hyper h = kHypers[nranks % 4];
        const int planes = planes_for(nranks);
        std::vector<int32_t> u(n);
        for (auto& c : u) c = static_cast<int32_t>(rng()() % (nranks + 1));
        const auto counter = encode_counter(u, planes);
        auto x = random_values(dtype, n);
        auto expected = x;
        apply_mean(x.data(), dtype, n, counter.data(), planes, 2, nranks, nranks, h.lr, h.wd);
        std::vector<uint8_t> delta(dtype_size(dtype));
        for (size_t j = 0; j < n; ++j) {
          // delta is rounded to the dtype first, like a delta tensor would be.
          store_float(dtype, static_cast<float>(2 * u[j] - nranks) / static_cast<float>(nranks), delta.data(), 0);
          expected_update(dtype, expected.data(), j, to_float(dtype, delta.data(), 0), h);
          expect_same_value(dtype, expected.data(), x.data(), j, "apply_mean");
        }
      }
    }
  }
}

// Every count a counter of 1 … 6 planes can hold, in range or not (a ternary mean of N ranks uses only
// 0 … 2N of them), through the AVX2 path's looked-up means and the scalar division: the same bytes.
TEST(ApplyCrossIsa, MeansOfEveryCountAgreeAcrossIsas) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "needs AVX2 to compare against";
  const Isa saved = active_isa();
  const size_t n = 64 * 40 + 9;
  for (int planes = 1; planes <= 6; ++planes) {
    for (int nranks : {3, 5, 12}) {
      std::vector<int32_t> u(n);
      for (size_t j = 0; j < n; ++j) u[j] = static_cast<int32_t>(j % (size_t{1} << planes));
      const auto counter = encode_counter(u, planes);
      for (DType dtype : kFloatTypes) {
        const auto x0 = random_values(dtype, n);
        std::vector<uint8_t> out[2][2];
        for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
          set_isa(isa);
          auto& o = out[static_cast<int>(isa)];
          o[0].assign(n * dtype_size(dtype), 0);
          unpack_mean(counter.data(), planes, n, 1, nranks, nranks, o[0].data(), dtype);
          o[1] = x0;
          apply_mean(o[1].data(), dtype, n, counter.data(), planes, 1, nranks, nranks, 0.01, 0.1);
        }
        set_isa(saved);
        for (int k = 0; k < 2; ++k) {
          ASSERT_EQ(out[0][k], out[1][k]) << dtype_name(dtype) << " planes " << planes << " N " << nranks
                                          << (k == 0 ? " unpack_mean" : " apply_mean");
        }
      }
    }
  }
}

// NaN in, NaN out; and the two ISAs agree on every output byte, NaN payloads included, since ranks
// with different CPUs must produce identical tensors.
TEST(ApplyCrossIsa, BitIdenticalAcrossIsas) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "needs AVX2 to compare against";
  const Isa saved = active_isa();
  const size_t n = 4099;
  for (DType dtype : kFloatTypes) {
    const auto x0 = random_values(dtype, n);
    const auto pos = random_plane(n);
    const auto tie = random_plane(n, 0.2);
    std::vector<int32_t> u(n);
    for (auto& c : u) c = static_cast<int32_t>(rng()() % 8);
    const auto counter = encode_counter(u, 3);
    std::vector<uint8_t> out[2][4];
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      set_isa(isa);
      auto& o = out[static_cast<int>(isa)];
      o[0] = x0;
      apply_vote(o[0].data(), dtype, n, pos.data(), tie.data(), 0.01, 0.1);
      o[1] = x0;
      apply_mean(o[1].data(), dtype, n, counter.data(), 3, 1, 3, 7, 0.01, 0.1);
      o[2].assign(n * dtype_size(dtype), 0);
      unpack_mean(counter.data(), 3, n, 2, 7, 7, o[2].data(), dtype);
      o[3].assign(n * dtype_size(dtype), 0);
      unpack_vote(pos.data(), tie.data(), n, o[3].data(), dtype);
    }
    set_isa(saved);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(out[0][k], out[1][k]) << dtype_name(dtype) << " output " << k;
    for (size_t j = 0; j < n; ++j) {
      if (is_nan(dtype, x0.data(), j)) {
        ASSERT_TRUE(is_nan(dtype, out[0][0].data(), j));
      }
    }
  }
}

// A float16 NaN narrows to torch's canonical quiet NaN with its sign (c10::Half: sign | 0x7E00) on
// every ISA; F16C's vcvtps2ph alone would keep the payload, which the standard collectives (which
// round like torch) would not.
TEST_P(ApplyTest, Float16NanNarrowsToTorchsCanonicalNan) {
  const std::vector<uint16_t> nans = {0x7C01, 0xFC01, 0x7E55, 0xFD00, 0x7FFF, 0xFFFF, 0x7E00, 0xFE00, 0x7D23};
  const size_t n = 64 * nans.size() + 5;  // whole AVX2 blocks and a scalar tail
  std::vector<uint16_t> x(n);
  for (size_t j = 0; j < n; ++j) x[j] = nans[j % nans.size()];
  const auto pos = random_plane(n);
  apply_vote(x.data(), DType::kFloat16, n, pos.data(), nullptr, 0.01, 0.1);
  for (size_t j = 0; j < n; ++j) {
    ASSERT_EQ(x[j], (nans[j % nans.size()] & 0x8000) | 0x7E00) << "element " << j << " from 0x" << std::hex
                                                                << nans[j % nans.size()];
  }
}

// bfloat16 as torch's c10::BFloat16: every NaN narrows to the one canonical 0x7FC0, sign dropped (the
// oracle compares NaNs only as NaNs, so the pattern itself is checked here, for the ISA without a twin
// to compare against, as on ARM).
TEST_P(ApplyTest, BFloat16NanNarrowsToTorchsCanonicalNan) {
  const std::vector<uint16_t> nans = {0x7F81, 0xFF81, 0x7FC5, 0xFFFF, 0x7FC0, 0xFFC0, 0x7FA3};
  const size_t n = 64 * nans.size() + 5;  // whole words, vector lanes and a scalar tail
  std::vector<uint16_t> x(n);
  for (size_t j = 0; j < n; ++j) x[j] = nans[j % nans.size()];
  const auto pos = random_plane(n);
  apply_vote(x.data(), DType::kBFloat16, n, pos.data(), nullptr, 0.01, 0.1);
  for (size_t j = 0; j < n; ++j) {
    ASSERT_EQ(x[j], 0x7FC0) << "element " << j << " from 0x" << std::hex << nans[j % nans.size()];
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(ApplyTest);

}  // namespace
}  // namespace pride::bits::test
