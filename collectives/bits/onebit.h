// CPU kernels of the error-compensated 1-bit compression (1-bit Adam, 0/1 Adam; Tang et al. 2021,
// Lu et al. 2023): a float32 vector y travels as its signs and one scale, scale = ‖y‖₂ / √n, and what
// the compression lost, y − scale·sign(y), is kept as an error that is added back next time.
//
// sign(y) is +1 where y ≥ 0 or y is NaN, −1 where y < 0 (DeepSpeed's `sign().add_(1).bool()`): never
// 0, so the compressed vector always has the norm of y. Sign bits use the packed-vote layout
// (kernels.h): element j is bit j % 64 of word j / 64, bit 1 = +1, bits past n zero.
//
// Sums of squares are taken in double, in eight interleaved partial sums combined pairwise
// (onebit_scalar.h), the same order on every ISA, so every rank that compresses the same values gets
// the same scale; the element-wise arithmetic is float32, rounded as written (the library is built
// with -ffp-contract=off). The portable and AVX2 kernels give identical bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pride::bits {

// y = x + error, in place on x (the feedback step). Returns Σ y² in double.
double add_error_and_square_sum(float* x, const float* error, size_t n);
// Σ y² in double (a vector that had no error added).
double square_sum(const float* y, size_t n);
// The scale of n elements whose squares sum to `square_sum`: sqrt(square_sum / n) as float, 0 when n = 0.
float onebit_scale(double square_sum, size_t n);
// The signs of y (words_for(n) words) and the new error: error = y − scale·sign(y).
void compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error);
// out[k] = (Σ_i scales[i]·sign_i[k]) / count over `count` sign vectors (sign_i = ±1 from bits[i]):
// the owner's average of the ranks' compressed chunks. Summed in double in index order, rounded once.
void average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out);
// out[k] = ±scale from the sign bits: the decompression.
void expand_signs(const uint64_t* signs, float scale, size_t n, float* out);

}  // namespace pride::bits
