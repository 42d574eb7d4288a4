// Portable kernels: plain C++ plus GCC vector extensions, no ISA flags. The reference the AVX2 path
// must match bit for bit, and the fallback on CPUs without AVX2.
#define PRIDE_KERNEL_NS portable

#include "collectives/bits/compressed_adam_impl.h"
#include "collectives/bits/counters_impl.h"
#include "collectives/bits/elementwise_scalar.h"
#include "collectives/bits/kernel_table.h"
#include "collectives/bits/levels_scalar.h"
#include "collectives/bits/lion_cub_impl.h"
#include "collectives/bits/lion_impl.h"
#include "collectives/bits/onebit_scalar.h"
#include "collectives/bits/plane_stats.h"
#include "collectives/bits/threshold_impl.h"

#include <cstring>
#include <type_traits>

namespace pride::bits::detail {
namespace {

using namespace portable;

// Two words per block: one SSE2 or NEON register, the baseline of every 64-bit target.
using Block = uint64_t __attribute__((vector_size(16)));

template <class Tr>
void pack_binary(const void* x, size_t n, uint64_t* plane) {
  pack_binary_from<Tr>(x, n, 0, plane);
}
template <class Tr>
void pack_ternary(const void* x, size_t n, uint64_t* pos, uint64_t* neg) {
  pack_ternary_from<Tr>(x, n, 0, pos, neg);
}
// body(i, p, t) for every 8 elements of the first `words` words: p[k] and t[k] are element i + k's pos and
// tie bits as 0 or 1 in lane type L, read 8 at a time from kBitLanes<L>, so the compiler vectorizes what
// body computes from them (SSE2, NEON), which a variable shift per element (vote_at) kept it from doing.
template <class L, class Body>
void for_each_vote_bits8(const uint64_t* pos, const uint64_t* tie, size_t words, Body&& body) {
  for (size_t w = 0; w < words; ++w) {
    const uint64_t p = pos[w], t = tie ? tie[w] : 0;
    for (int b = 0; b < 8; ++b) {
      body(64 * w + size_t(8 * b), kBitLanes<L>.lanes[(p >> (8 * b)) & 0xFF], kBitLanes<L>.lanes[(t >> (8 * b)) & 0xFF]);
    }
  }
}

// body(i, delta): delta[k] is element i + k's vote as a float, +1 where pos, else 0 where tie, else -1
// (vote_at's values, exactly).
template <class Body>
void for_each_vote8(const uint64_t* pos, const uint64_t* tie, size_t words, Body&& body) {
  for_each_vote_bits8<float>(pos, tie, words, [&](size_t i, const float* pb, const float* tb) {
    float delta[8];
    for (int k = 0; k < 8; ++k) delta[k] = pb[k] - (1.0f - pb[k]) * (1.0f - tb[k]);
    body(i, delta);
  });
}

template <class Tr>
void unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* yv, OutputStores) {
  // Plain stores: the portable unit has no streaming ones.
  using T = typename Tr::T;
  auto* y = static_cast<T*>(yv);
  if constexpr (sizeof(T) < 4) {
    // An output narrower than 32 bits (bf16, fp16, int8): a vote's three values are fixed bit patterns,
    // selected with masks made from lanes of the output's own width. No conversion per element, so the
    // selects vectorize 8 or 16 to a register, where from_f32 of each float vote (its rounding and NaN
    // branches) did not vectorize at all.
    using U = std::make_unsigned_t<T>;
    const auto pattern = [](float vote) { return U(Tr::from_f32(vote)); };
    const U plus = pattern(1.0f), zero = pattern(0.0f), minus = pattern(-1.0f);
    for_each_vote_bits8<U>(pos, tie, n / 64, [&](size_t i, const U* pb, const U* tb) {
      U v[8];
      for (int k = 0; k < 8; ++k) {
        const U is_pos = U(0u - pb[k]), is_tie = U(0u - tb[k]);  // all ones or zero
        v[k] = U((plus & is_pos) | (~is_pos & ((zero & is_tie) | (minus & ~is_tie))));
      }
      std::memcpy(y + i, v, sizeof v);
    });
  } else {
    for_each_vote8(pos, tie, n / 64, [&](size_t i, const float* delta) {
      for (int k = 0; k < 8; ++k) y[i + size_t(k)] = Tr::from_f32(delta[k]);
    });
  }
  unpack_vote_from<Tr>(pos, tie, n, n / 64 * 64, yv);
}
template <class Tr>
void unpack_mean(const uint64_t* count, int planes, size_t n, const MeanParams& m, void* y) {
  unpack_mean_from<Tr>(count, planes, n, 0, m, y);
}
// Four bf16 values as GCC vectors of one 16-byte register (SSE2, NEON): widened by a shift, narrowed as
// f32_to_bf16 does (round to nearest even by the same bias, a NaN to 0x7FC0), lane for lane the element
// functions' bits. Written out because GCC does not vectorize the element loop's mix of 16- and 32-bit
// arithmetic on its own, and splits wider generic vectors' compares into a branch per lane.
using U16x4 = uint16_t __attribute__((vector_size(8)));
using U32x4 = uint32_t __attribute__((vector_size(16)));
using I32x4 = int32_t __attribute__((vector_size(16)));
using F32x4 = float __attribute__((vector_size(16)));

inline F32x4 bf16x4_to_f32(U16x4 h) {
  const U32x4 bits = __builtin_convertvector(h, U32x4) << 16;
  F32x4 f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline U16x4 f32x4_to_bf16(F32x4 f) {
  U32x4 u;
  std::memcpy(&u, &f, sizeof u);
  const U32x4 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  // The NaN test as a signed compare of the magnitude (both sides below 2^31): SSE2 has no unsigned one.
  const U32x4 is_nan = U32x4(I32x4(u & 0x7FFFFFFFu) > 0x7F800000);
  return __builtin_convertvector((rounded & ~is_nan) | (is_nan & 0x7FC0u), U16x4);
}

template <class Tr>
void apply_vote(void* xv, size_t n, const uint64_t* pos, const uint64_t* tie, const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<Tr>(given);
  auto* x = static_cast<typename Tr::T*>(xv);
  if constexpr (std::is_same_v<Tr, BF16>) {
    // lion_update<BF16>, 4 lanes at a time: x1 = bf16(x·factor), then bf16(x1 − lr·delta).
    for_each_vote8(pos, tie, n / 64, [&](size_t i, const float* delta) {
      for (int h = 0; h < 8; h += 4) {
        U16x4 v;
        F32x4 d;
        std::memcpy(&v, x + i + size_t(h), sizeof v);
        std::memcpy(&d, delta + h, sizeof d);
        const F32x4 x1 = bf16x4_to_f32(f32x4_to_bf16(bf16x4_to_f32(v) * a.factor));
        v = f32x4_to_bf16(x1 - a.lr * d);
        std::memcpy(x + i + size_t(h), &v, sizeof v);
      }
    });
  } else if constexpr (std::is_same_v<Tr, F32>) {
    for_each_vote8(pos, tie, n / 64, [&](size_t i, const float* delta) {  // lion_update<F32>, 4 lanes
      for (int h = 0; h < 8; h += 4) {
        F32x4 v, d;
        std::memcpy(&v, x + i + size_t(h), sizeof v);
        std::memcpy(&d, delta + h, sizeof d);
        v = v * a.factor - a.lr * d;
        std::memcpy(x + i + size_t(h), &v, sizeof v);
      }
    });
  } else {
    for_each_vote8(pos, tie, n / 64, [&](size_t i, const float* delta) {
      for (int k = 0; k < 8; ++k) x[i + size_t(k)] = lion_update<Tr>(x[i + size_t(k)], delta[k], a);
    });
  }
  apply_vote_from<Tr>(xv, n, n / 64 * 64, pos, tie, given);
}
template <class Tr>
void apply_mean(void* x, size_t n, const uint64_t* count, int planes, const MeanParams& m, const ApplyParams& a) {
  apply_mean_from<Tr>(x, n, 0, count, planes, m, a);
}

double onebit_add_error_and_square_sum(float* x, const float* error, size_t n) {
  double lanes[kSquareLanes] = {};
  add_error_and_square_sum_from(x, error, n, 0, lanes);
  return combine_square_lanes(lanes);
}
double onebit_square_sum(const float* y, size_t n) {
  double lanes[kSquareLanes] = {};
  square_sum_from(y, n, 0, lanes);
  return combine_square_lanes(lanes);
}
void onebit_compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error) {
  compress_signs_from(y, scale, n, 0, signs, error);
}
void onebit_average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out) {
  average_signs_from(signs, scales, count, n, 0, out);
}
void onebit_expand_signs(const uint64_t* signs, float scale, size_t n, float* out) {
  expand_signs_from(signs, scale, n, 0, out);
}

}  // namespace

const KernelTable& portable_table() {
  // Element kernels are indexed by DType: float32, bfloat16, float16, int8.
  static constexpr KernelTable table = {
      Isa::kScalar,
      {pack_binary<F32>, pack_binary<BF16>, pack_binary<F16>, nullptr},
      {pack_ternary<F32>, pack_ternary<BF16>, pack_ternary<F16>, nullptr},
      {unpack_vote<F32>, unpack_vote<BF16>, unpack_vote<F16>, unpack_vote<I8>},
      {unpack_mean<F32>, unpack_mean<BF16>, unpack_mean<F16>, nullptr},
      {apply_vote<F32>, apply_vote<BF16>, apply_vote<F16>, nullptr},
      {apply_mean<F32>, apply_mean<BF16>, apply_mean<F16>, nullptr},
      {lion_vote<F32>, lion_vote<BF16>, lion_vote<F16>, nullptr},
      counter_add_plane<Block>,
      counter_add<Block>,
      count_planes<Block>,
      counter_signed_offset<Block>,
      vote_from_count<Block>,
      vote_from_counts<Block>,
      popcount,
      count_equal,
      {onebit_add_error_and_square_sum, onebit_square_sum, onebit_compress_signs, onebit_average_signs,
       onebit_expand_signs},
      {adam_local_step<F32>, adam_local_step<BF16>, adam_local_step<F16>, nullptr},
      {adam_sync<F32>, adam_sync<BF16>, adam_sync<F16>, nullptr},
      {adam_momentum<F32>, adam_momentum<BF16>, adam_momentum<F16>, nullptr},
      {adam_apply<F32>, adam_apply<BF16>, adam_apply<F16>, nullptr},
      pack_levels_scalar,
      {lion_cub_interpolate<F32>, lion_cub_interpolate<BF16>, nullptr, nullptr},  // float16: lion_cub.h
      lion_cub_levels,
      {lion_cub_apply_sign<F32>, lion_cub_apply_sign<BF16>, nullptr, nullptr},
  };
  return table;
}

}  // namespace pride::bits::detail
