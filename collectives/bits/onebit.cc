#include "collectives/bits/onebit.h"

#include <cmath>
#include <vector>

#include "collectives/bits/kernels.h"

namespace pride::bits {
namespace {

inline bool positive_sign(float y) { return !(y < 0.0f); }  // +1 for y ≥ 0, −0 and NaN
inline float signed_scale(bool positive, float scale) { return positive ? scale : -scale; }

}  // namespace

double add_error_and_square_sum(float* x, const float* error, size_t n) {
  double sum = 0.0;
  for (size_t k = 0; k < n; ++k) {
    x[k] = x[k] + error[k];
    sum += double(x[k]) * double(x[k]);
  }
  return sum;
}

double square_sum(const float* y, size_t n) {
  double sum = 0.0;
  for (size_t k = 0; k < n; ++k) sum += double(y[k]) * double(y[k]);
  return sum;
}

float onebit_scale(double square_sum, size_t n) {
  return n == 0 ? 0.0f : float(std::sqrt(square_sum / double(n)));
}

void compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error) {
  for (size_t w = 0; w < words_for(n); ++w) {
    const size_t begin = w * 64, end = begin + 64 < n ? begin + 64 : n;
    uint64_t word = 0;
    for (size_t k = begin; k < end; ++k) {
      const bool positive = positive_sign(y[k]);
      word |= uint64_t(positive) << (k - begin);
      error[k] = y[k] - signed_scale(positive, scale);
    }
    signs[w] = word;
  }
}

void average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out) {
  // Σ_i scale_i·s_i = 2·Σ_{i: bit set} scale_i − Σ_i scale_i would be faster, but its rounding differs
  // from the formula's; the owner's chunk is 1/N of the tensor, so the plain sum costs little.
  for (size_t k = 0; k < n; ++k) {
    double sum = 0.0;
    for (int i = 0; i < count; ++i) {
      const bool positive = (signs[i][k / 64] >> (k % 64)) & 1u;
      sum += positive ? double(scales[i]) : -double(scales[i]);
    }
    out[k] = float(sum / double(count));
  }
}

void expand_signs(const uint64_t* signs, float scale, size_t n, float* out) {
  for (size_t k = 0; k < n; ++k) out[k] = signed_scale((signs[k / 64] >> (k % 64)) & 1u, scale);
}

}  // namespace pride::bits
