// The public 1-bit compression kernels: a call through the active ISA's table (onebit_scalar.h,
// onebit_avx2.h), which give identical results.
#include "collectives/bits/onebit.h"

#include <cmath>

#include "collectives/bits/kernel_table.h"

namespace pride::bits {
namespace {

const detail::OnebitKernels& kernels() { return detail::active_table().onebit; }

}  // namespace

double add_error_and_square_sum(float* x, const float* error, size_t n) {
  return kernels().add_error_and_square_sum(x, error, n);
}

double square_sum(const float* y, size_t n) { return kernels().square_sum(y, n); }

float onebit_scale(double square_sum, size_t n) {
  return n == 0 ? 0.0f : float(std::sqrt(square_sum / double(n)));
}

void compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error) {
  kernels().compress_signs(y, scale, n, signs, error);
}

void average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out) {
  kernels().average_signs(signs, scales, count, n, out);
}

void expand_signs(const uint64_t* signs, float scale, size_t n, float* out) {
  kernels().expand_signs(signs, scale, n, out);
}

}  // namespace pride::bits
