// 1-bit Adam's and 0/1 Adam's fused frozen-variance steps (compressed_adam.h) against a per-element
// oracle that spells out torch's operations one at a time, on both ISAs, over every dtype, special values
// and odd lengths. (tests/python/test_onebit.py compares the fused optimizers with their torch
// operations themselves.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/bits/compressed_adam.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

class CompressedAdamTest : public IsaTest {};

std::vector<float> floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / 4);
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // memcpy of null is undefined, even of 0 bytes
  return out;
}

// A variance: non-negative (its sign bit cleared), some exact zeros.
std::vector<float> variance(size_t n) {
  auto v = floats(random_values(DType::kFloat32, n));
  for (size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? 0.0f : std::fabs(v[i]);
  return v;
}

float rounded(DType dtype, float f) {
  uint8_t buf[4];
  store_float(dtype, f, buf, 0);
  return to_float(dtype, buf, 0);
}

void expect_float(float want, float got, const char* what, size_t j) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " j=" << j;
  } else {
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    ASSERT_EQ(a, b) << what << " j=" << j << ": want " << want << ", got " << got;
  }
}

TEST_P(CompressedAdamTest, LocalStepIsTorchsOperationsOneAtATime) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (size_t n : lengths()) {
      for (int variant = 0; variant < 16; ++variant) {
        const bool has_grad = variant & 1, decay = variant & 2, bias = variant & 4, sync = variant & 8;
        AdamLocalStep step;
        step.lr = 3e-3;
        step.beta1 = variant % 3 == 0 ? 0.3 : 0.9;  // lerp's weight above and below 0.5
        step.eps = 1e-6;
        step.weight_decay = decay ? 0.1 : 0.0;
        step.bias_correction = bias;
        step.step_size = bias ? step.lr / (1 - std::pow(step.beta1, 7)) : step.lr;
        step.bias_correction2_sqrt = bias ? std::sqrt(1 - std::pow(0.999, 5)) : 1.0;
        auto p = random_values(dtype, n);
        const auto g = random_values(dtype, n), p0 = p;
        auto m = floats(random_values(DType::kFloat32, n)), acc = floats(random_values(DType::kFloat32, n));
        const auto m0 = m, acc0 = acc, v = variance(n);
        std::vector<float> scaled(n, -7.0f);
        zero_one_adam_local_step(p.data(), has_grad ? g.data() : nullptr, dtype, m.data(), v.data(), acc.data(), n,
                                 step, sync ? scaled.data() : nullptr);
        const float w = float(1 - step.beta1);
        for (size_t j = 0; j < n; ++j) {
          const float gj = has_grad ? to_float(dtype, g.data(), j) : 0.0f;
          const float diff = gj - m0[j];
          const float mj = std::fabs(w) < 0.5f ? std::fma(w, diff, m0[j]) : std::fma(w - 1.0f, diff, gj);
          const float before = to_float(dtype, p0.data(), j);
          float x = decay ? before * float(1 - step.lr * step.weight_decay) : before;
          float root = std::sqrt(v[j]);
          float denom = (bias ? root / float(step.bias_correction2_sqrt) : root) + float(step.eps);
          x = rounded(dtype, x + (float(-step.step_size) * mj) / denom);
          const float total = acc0[j] + (x - before);
          expect_float(mj, m[j], "m", j);
          uint8_t want_p[4];
          store_float(dtype, x, want_p, 0);
          expect_same_value(dtype, want_p, p.data() + j * dtype_size(dtype), 0, "p");
          if (sync) {
            expect_float(total * (root + float(step.eps)), scaled[j], "scaled", j);
            expect_float(acc0[j], acc[j], "acc (untouched on a synchronisation)", j);
          } else {
            expect_float(total, acc[j], "acc", j);
          }
          if (HasFatalFailure() || HasNonfatalFailure()) {
            FAIL() << dtype_name(dtype) << " n=" << n << " variant=" << variant;
          }
        }
      }
    }
  }
}

TEST_P(CompressedAdamTest, SyncIsTorchsOperationsOneAtATime) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (size_t n : lengths()) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool mask = variant & 1;
        AdamSync sync;
        sync.eps = 1e-6;
        sync.lr_sum = variant & 2 ? 0.0 : 0.0123;
        sync.mask_zero_variance = mask;
        const auto mean = floats(random_values(DType::kFloat32, n)), v = variance(n);
        auto m = floats(random_values(DType::kFloat32, n)), anchor = floats(random_values(DType::kFloat32, n));
        auto acc = floats(random_values(DType::kFloat32, n));
        auto p = random_values(dtype, n);
        const auto m0 = m, anchor0 = anchor;
        zero_one_adam_sync(mean.data(), v.data(), m.data(), anchor.data(), acc.data(), p.data(), dtype, n, sync);
        for (size_t j = 0; j < n; ++j) {
          const float x = mask ? mean[j] * (v[j] > 0.0f ? 1.0f : 0.0f) : mean[j];
          expect_float(sync.lr_sum > 0 ? x / float(-sync.lr_sum) : m0[j], m[j], "m", j);
          const float a = anchor0[j] + x / (std::sqrt(v[j]) + float(sync.eps));
          expect_float(a, anchor[j], "anchor", j);
          uint8_t want_p[4];
          store_float(dtype, a, want_p, 0);
          expect_same_value(dtype, want_p, p.data() + j * dtype_size(dtype), 0, "p");
          expect_float(0.0f, acc[j], "acc", j);
          if (HasFatalFailure() || HasNonfatalFailure()) {
            FAIL() << dtype_name(dtype) << " n=" << n << " variant=" << variant;
          }
        }
      }
    }
  }
}

TEST_P(CompressedAdamTest, OnebitMomentumAndApplyAreTorchsOperationsOneAtATime) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (size_t n : lengths()) {
      for (int variant = 0; variant < 16; ++variant) {
        const bool has_grad = variant & 1, decay = variant & 2, bias = variant & 4, mask = variant & 8;
        const double beta1 = variant % 3 == 0 ? 0.3 : 0.9;
        const auto g = random_values(dtype, n);
        auto m = floats(random_values(DType::kFloat32, n));
        const auto m0 = m;
        std::vector<float> out(n, -7.0f);
        onebit_adam_momentum(has_grad ? g.data() : nullptr, dtype, m.data(), n, beta1, out.data());
        const float w = float(1 - beta1);
        for (size_t j = 0; j < n; ++j) {
          const float gj = has_grad ? to_float(dtype, g.data(), j) : 0.0f;
          const float diff = gj - m0[j];
          const float mj = std::fabs(w) < 0.5f ? std::fma(w, diff, m0[j]) : std::fma(w - 1.0f, diff, gj);
          expect_float(mj, m[j], "m", j);
          expect_float(mj, out[j], "out", j);
        }
        AdamApply apply;
        apply.lr = 3e-3;
        apply.eps = 1e-6;
        apply.weight_decay = decay ? 0.1 : 0.0;
        apply.bias_correction = bias;
        apply.step_size = bias ? apply.lr / (1 - std::pow(0.9, 7)) : apply.lr;
        apply.bias_correction2_sqrt = bias ? std::sqrt(1 - std::pow(0.999, 5)) : 1.0;
        apply.mask_zero_variance = mask;
        const auto mean = floats(random_values(DType::kFloat32, n)), v = variance(n);
        auto p = random_values(dtype, n);
        const auto p0 = p;
        onebit_adam_apply(mean.data(), v.data(), m.data(), p.data(), dtype, n, apply);
        for (size_t j = 0; j < n; ++j) {
          const float x = mask ? mean[j] * (v[j] > 0.0f ? 1.0f : 0.0f) : mean[j];
          expect_float(x, m[j], "m after apply", j);
          const float before = to_float(dtype, p0.data(), j);
          const float decayed = decay ? before * float(1 - apply.lr * apply.weight_decay) : before;
          const float root = std::sqrt(v[j]);
          const float denom = (bias ? root / float(apply.bias_correction2_sqrt) : root) + float(apply.eps);
          uint8_t want_p[4];
          store_float(dtype, decayed + (float(-apply.step_size) * x) / denom, want_p, 0);
          expect_same_value(dtype, want_p, p.data() + j * dtype_size(dtype), 0, "p");
          if (HasFatalFailure() || HasNonfatalFailure()) {
            FAIL() << dtype_name(dtype) << " n=" << n << " variant=" << variant;
          }
        }
      }
    }
  }
}

TEST(CompressedAdam, RefusesInt8) {
  float m = 0, v = 0, acc = 0;
  int8_t p = 0;
  EXPECT_THROW(zero_one_adam_local_step(&p, nullptr, DType::kInt8, &m, &v, &acc, 1, {}, nullptr),
               std::invalid_argument);
  EXPECT_THROW(zero_one_adam_sync(&m, &v, &m, &acc, &acc, &p, DType::kInt8, 1, {}), std::invalid_argument);
  EXPECT_THROW(onebit_adam_momentum(&p, DType::kInt8, &m, 1, 0.9, &acc), std::invalid_argument);
  EXPECT_THROW(onebit_adam_apply(&m, &v, &m, &p, DType::kInt8, 1, {}), std::invalid_argument);
}

PRIDE_INSTANTIATE_ISA_TESTS(CompressedAdamTest);

}  // namespace
}  // namespace pride::bits::test
