// AVX2 element kernels: 64 elements (one plane word) per step; the last n % 64 elements go through
// the scalar code in elementwise_scalar.h, whose results these must equal bit for bit. Only
// included from kernels_avx2.cc, which is compiled with -mavx2 -mf16c -mpopcnt.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/elementwise_scalar.h"
#include "collectives/bits/kernel_table.h"
#include "collectives/bits/word_block.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// ---- Bits to lane masks: lane i is all ones where bit i is set --------------------------------------
template <int kBytes>
__m256i lanes_from_bits(uint32_t bits);

template <>
inline __m256i lanes_from_bits<4>(uint32_t bits) {  // 8 lanes of 32 bits
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), sel), sel);
}

template <>
inline __m256i lanes_from_bits<2>(uint32_t bits) {  // 16 lanes of 16 bits
  const __m256i sel = _mm256_setr_epi16(0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100, 0x200, 0x400, 0x800,
                                        0x1000, 0x2000, 0x4000, static_cast<short>(0x8000));
  return _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<short>(bits)), sel), sel);
}

template <>
inline __m256i lanes_from_bits<1>(uint32_t bits) {  // 32 lanes of 8 bits
  // Copy byte k of `bits` into lanes 8k..8k+7, then test one bit per lane.
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

// ---- Per-dtype vector access ---------------------------------------------------------------------
// pos64/neg64: the vote bits of 64 elements. load8/store8: 8 elements as float32 lanes, store8
// rounding like Scalar::from_f32. round8: store8 then load8, without the memory, except that a NaN
// stays the NaN it was instead of becoming the canonical one. round8 rounds intermediate values only,
// and whatever a NaN meets next (products, sums, comparisons) gives a NaN or no vote whatever its
// sign and payload, and every value that reaches memory goes through store8, which canonicalises: so
// the results are store8's bit for bit, without two instructions per rounding. (Rounding a NaN of
// this code keeps it a NaN: its low 16 bits are zero, since it comes from a widened bf16 or fp16, an
// x86 operation quieting or propagating one, or the default NaN 0xFFC00000.)

struct Avx2F32 {
  using Scalar = F32;
  template <int kPredicate>
  static uint64_t compare_bits64(const float* x) {
    uint64_t bits = 0;
    for (int k = 0; k < 8; ++k) {
      const __m256 m = _mm256_cmp_ps(_mm256_loadu_ps(x + 8 * k), _mm256_setzero_ps(), kPredicate);
      bits |= uint64_t{static_cast<uint32_t>(_mm256_movemask_ps(m))} << (8 * k);
    }
    return bits;
  }
  // Ordered comparisons: NaN is neither > 0 nor < 0.
  static uint64_t pos64(const float* x) { return compare_bits64<_CMP_GT_OQ>(x); }
  static uint64_t neg64(const float* x) { return compare_bits64<_CMP_LT_OQ>(x); }
  static __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
  static void store8(float* x, __m256 v) { _mm256_storeu_ps(x, v); }
  static __m256 round8(__m256 v) { return v; }
};

// bf16 and fp16 votes are integer range tests on the bits, as in element_traits.h: x > 0 iff the
// bits read as int16 lie in [1, inf], x < 0 iff they lie in [0x8001, 0x8000 | inf] (as int16,
// [-32767, (int16)(0x8000 | inf)]): -0 and the NaNs above the infinities fall outside both.
template <uint16_t kInf>
struct Avx2Half16Votes {
  static __m256i in_range(__m256i v, int16_t lo, int16_t hi) {
    const __m256i above = _mm256_cmpgt_epi16(v, _mm256_set1_epi16(static_cast<short>(lo - 1)));
    const __m256i below = _mm256_cmpgt_epi16(_mm256_set1_epi16(static_cast<short>(hi + 1)), v);
    return _mm256_and_si256(above, below);
  }
  // 32 lanes of 16-bit masks to 32 bits: packs interleaves the 128-bit halves, the permute undoes it.
  static uint64_t bits32(const uint16_t* x, int16_t lo, int16_t hi) {
    const __m256i a = in_range(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)), lo, hi);
    const __m256i b = in_range(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)), lo, hi);
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), _MM_SHUFFLE(3, 1, 2, 0));
    return static_cast<uint32_t>(_mm256_movemask_epi8(bytes));
  }
  static uint64_t range64(const uint16_t* x, int16_t lo, int16_t hi) {
    return bits32(x, lo, hi) | (bits32(x + 32, lo, hi) << 32);
  }
  static uint64_t pos64(const uint16_t* x) { return range64(x, 1, static_cast<int16_t>(kInf)); }
  static uint64_t neg64(const uint16_t* x) {
    return range64(x, -32767, static_cast<int16_t>(0x8000 | kInf));
  }
};

struct Avx2BF16 : Avx2Half16Votes<0x7F80> {
  using Scalar = BF16;
  static __m256 load8(const uint16_t* x) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // Rounded float32 bits with the bf16 in the top half: the bias trick of f32_to_bf16 (a NaN stays one).
  static __m256i round_bits(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i biased = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    return _mm256_and_si256(biased, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  }
  // As f32_to_bf16: NaN -> 0x7FC0.
  static void store8(uint16_t* x, __m256 v) {
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i bits = _mm256_blendv_epi8(round_bits(v), _mm256_set1_epi32(0x7FC00000), nan);
    const __m256i r = _mm256_srli_epi32(bits, 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(x), packed);
  }
  static __m256 round8(__m256 v) { return _mm256_castsi256_ps(round_bits(v)); }
};

struct Avx2F16 : Avx2Half16Votes<0x7C00> {
  using Scalar = F16;
  static __m256 load8(const uint16_t* x) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  }
  // vcvtps2ph, except that a NaN becomes the canonical 0x7E00 with its sign (f32_to_f16, torch).
  static __m128i narrow8(__m256 v) {
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    const __m128i canonical = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                           _mm_set1_epi16(0x7E00));
    return _mm_blendv_epi8(h, canonical, nan16);
  }
  static void store8(uint16_t* x, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(x), narrow8(v)); }
  static __m256 round8(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
};

// ---- Pack ----------------------------------------------------------------------------------------
template <class A>
void pack_binary(const void* xv, size_t n, uint64_t* plane) {
  const auto* x = static_cast<const typename A::Scalar::T*>(xv);
  const size_t full = n / 64;
  for (size_t w = 0; w < full; ++w) plane[w] = A::pos64(x + 64 * w);
  pack_binary_from<typename A::Scalar>(xv, n, 64 * full, plane);
}

template <class A>
void pack_ternary(const void* xv, size_t n, uint64_t* pos, uint64_t* neg) {
  const auto* x = static_cast<const typename A::Scalar::T*>(xv);
  const size_t full = n / 64;
  for (size_t w = 0; w < full; ++w) {
    pos[w] = A::pos64(x + 64 * w);
    neg[w] = A::neg64(x + 64 * w);
  }
  pack_ternary_from<typename A::Scalar>(xv, n, 64 * full, pos, neg);
}

// ---- Unpack votes --------------------------------------------------------------------------------
template <int kBytes>
__m256i splat_pattern(uint32_t pattern) {
  if constexpr (kBytes == 4) return _mm256_set1_epi32(static_cast<int>(pattern));
  if constexpr (kBytes == 2) return _mm256_set1_epi16(static_cast<short>(pattern));
  if constexpr (kBytes == 1) return _mm256_set1_epi8(static_cast<char>(pattern));
}

template <class Tr>
uint32_t pattern_of(float v) {
  const typename Tr::T t = Tr::from_f32(v);
  uint32_t bits = 0;
  std::memcpy(&bits, &t, sizeof t);
  return bits;
}

// How a vector of unpacked votes is stored: through the cache, or streamed (non-temporal) as one 32-byte
// store where y is 32-byte aligned or two 16-byte stores where it is 16-byte aligned (malloc's large
// blocks are). Streamed stores are weakly ordered: the loop publishes them with a fence before it returns.
enum class VoteStore { kCached, kStream32, kStream16 };

// Works for every output width: one 32-byte store covers 32 / sizeof(T) elements, whose lane masks
// come from as many bits of the plane words.
template <class Tr, VoteStore kStore>
void unpack_vote_words(const uint64_t* pos, const uint64_t* tie, size_t full, char* y) {
  constexpr int kBytes = sizeof(typename Tr::T);
  constexpr int kPerVec = 32 / kBytes;
  constexpr uint64_t kLaneBits = (uint64_t{1} << kPerVec) - 1;
  const __m256i plus = splat_pattern<kBytes>(pattern_of<Tr>(1.0f));
  const __m256i minus = splat_pattern<kBytes>(pattern_of<Tr>(-1.0f));
  for (size_t w = 0; w < full; ++w) {
    const uint64_t pw = pos[w];
    const uint64_t zw = tie ? tie[w] & ~pw : 0;  // ties that are not overridden by pos
    for (int k = 0; k < 64; k += kPerVec) {
      const __m256i p = lanes_from_bits<kBytes>(static_cast<uint32_t>((pw >> k) & kLaneBits));
      const __m256i z = lanes_from_bits<kBytes>(static_cast<uint32_t>((zw >> k) & kLaneBits));
      const __m256i v = _mm256_andnot_si256(z, _mm256_blendv_epi8(minus, plus, p));
      char* out = y + (64 * w + k) * kBytes;
      if constexpr (kStore == VoteStore::kStream32) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(out), v);
      } else if constexpr (kStore == VoteStore::kStream16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(v));
        _mm_stream_si128(reinterpret_cast<__m128i*>(out + 16), _mm256_extracti128_si256(v, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
      }
    }
  }
  if constexpr (kStore != VoteStore::kCached) _mm_sfence();
}

template <class Tr>
void unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* yv, OutputStores stores) {
  auto* y = static_cast<char*>(yv);
  const size_t full = n / 64;
  const uintptr_t address = reinterpret_cast<uintptr_t>(y);
  const bool stream = stores == OutputStores::kStreaming || n * sizeof(typename Tr::T) >= kStreamingStoreBytes;
  if (stream && address % 32 == 0) {
    unpack_vote_words<Tr, VoteStore::kStream32>(pos, tie, full, y);
  } else if (stream && address % 16 == 0) {
    unpack_vote_words<Tr, VoteStore::kStream16>(pos, tie, full, y);
  } else {
    unpack_vote_words<Tr, VoteStore::kCached>(pos, tie, full, y);
  }
  unpack_vote_from<Tr>(pos, tie, n, 64 * full, yv);
}

// The votes of 8 elements starting at bit k of word w, as float32 -1, 0, +1.
inline __m256 votes8(const uint64_t* pos, const uint64_t* tie, size_t w, int k) {
  const uint64_t pw = pos[w] >> k;
  const uint64_t zw = tie ? (tie[w] >> k) & ~pw : 0;
  const __m256 p = _mm256_castsi256_ps(lanes_from_bits<4>(pw & 0xFF));
  const __m256 z = _mm256_castsi256_ps(lanes_from_bits<4>(zw & 0xFF));
  return _mm256_andnot_ps(z, _mm256_blendv_ps(_mm256_set1_ps(-1.0f), _mm256_set1_ps(1.0f), p));
}

// ---- Mean ----------------------------------------------------------------------------------------
// The vector path computes s in int32 lanes; it is taken only when s fits (see mean_fits_int32),
// so int32 -> float32 rounds exactly like the scalar int64 -> float32.
inline bool mean_fits_int32(int planes, const MeanParams& m) {
  const int64_t max_u = (int64_t{1} << planes) - 1;
  const int64_t lo = -m.offset;
  const int64_t hi = m.scale * max_u - m.offset;
  return planes <= 24 && m.scale >= 0 && m.scale <= 4 && lo >= INT32_MIN && hi <= INT32_MAX && lo <= INT32_MAX;
}

// The counts of 8 elements gathered from their planes by Horner's rule, top plane first:
// u = 2u + bit. One table load, an add and an or per plane, instead of testing each lane's bit.
inline __m256 means8(const uint64_t* count, int planes, size_t nwords, const MeanParams& m, size_t w, int k) {
  __m256i u = _mm256_setzero_si256();
  for (int p = planes - 1; p >= 0; --p) {
    const uint32_t byte = static_cast<uint32_t>(count[p * nwords + w] >> k) & 0xFFu;
    const __m256i bits = _mm256_load_si256(reinterpret_cast<const __m256i*>(kBitLanes<int32_t>.lanes[byte]));
    u = _mm256_or_si256(_mm256_add_epi32(u, u), bits);
  }
  const __m256i s = _mm256_sub_epi32(_mm256_mullo_epi32(u, _mm256_set1_epi32(m.scale)),
                                     _mm256_set1_epi32(static_cast<int>(m.offset)));
  return _mm256_div_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(m.nranks));
}

// With at most 5 planes a count takes at most 32 values: their means, computed once by mean_at's
// arithmetic (float(s) / float(N), so the same bits), are looked up by permutes instead of a multiply,
// a conversion and a division per 8 elements. Row r holds the means of counts 8r … 8r + 7.
constexpr int kMeanTablePlanes = 5;
struct MeanTable {
  __m256 rows[4];
  MeanTable(int planes, const MeanParams& m) {
    alignas(32) float value[1 << kMeanTablePlanes];
    for (int u = 0; u < (1 << kMeanTablePlanes); ++u) {
      const int64_t s = m.scale * static_cast<int64_t>(u < (1 << planes) ? u : 0) - m.offset;
      value[u] = static_cast<float>(s) / m.nranks;
    }
    for (int r = 0; r < 4; ++r) rows[r] = _mm256_load_ps(value + 8 * r);
  }
};

// The counts u of 8 elements (Horner's rule over P planes, as means8), then their table entries: a
// permute by u's low 3 bits within each 8-entry row, and blends by bits 3 and 4 (moved to the sign
// bit, which blendv reads) between rows.
template <int P>
inline __m256 means8_looked_up(const uint64_t* count, size_t nwords, size_t w, int k, const MeanTable& table) {
  const __m256* rows = table.rows;
  __m256i u = _mm256_setzero_si256();
  for (int p = P - 1; p >= 0; --p) {
    const uint32_t byte = static_cast<uint32_t>(count[p * nwords + w] >> k) & 0xFFu;
    const __m256i bits = _mm256_load_si256(reinterpret_cast<const __m256i*>(kBitLanes<int32_t>.lanes[byte]));
    u = _mm256_or_si256(_mm256_add_epi32(u, u), bits);
  }
  const __m256 r0 = _mm256_permutevar8x32_ps(rows[0], u);
  if constexpr (P <= 3) {
    return r0;
  } else {
    const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(u, 28));
    const __m256 low = _mm256_blendv_ps(r0, _mm256_permutevar8x32_ps(rows[1], u), bit3);
    if constexpr (P == 4) {
      return low;
    } else {
      const __m256 high = _mm256_blendv_ps(_mm256_permutevar8x32_ps(rows[2], u),
                                           _mm256_permutevar8x32_ps(rows[3], u), bit3);
      return _mm256_blendv_ps(low, high, _mm256_castsi256_ps(_mm256_slli_epi32(u, 27)));
    }
  }
}

template <class A, int P>
void unpack_mean_looked_up(const uint64_t* count, size_t n, const MeanParams& m, void* yv) {
  auto* y = static_cast<typename A::Scalar::T*>(yv);
  const size_t nwords = (n + 63) / 64, full = n / 64;
  const MeanTable table(P, m);
  for (size_t w = 0; w < full; ++w)
    for (int k = 0; k < 64; k += 8) A::store8(y + 64 * w + k, means8_looked_up<P>(count, nwords, w, k, table));
  unpack_mean_from<typename A::Scalar>(count, P, n, 64 * full, m, yv);
}

template <class A>
void unpack_mean(const uint64_t* count, int planes, size_t n, const MeanParams& m, void* yv) {
  // Wider counters take the division.
  if (with_fixed_planes<kMeanTablePlanes>(planes, [&](auto P) { unpack_mean_looked_up<A, P()>(count, n, m, yv); })) {
    return;
  }
  auto* y = static_cast<typename A::Scalar::T*>(yv);
  const size_t nwords = (n + 63) / 64;
  const size_t full = mean_fits_int32(planes, m) ? n / 64 : 0;
  for (size_t w = 0; w < full; ++w)
    for (int k = 0; k < 64; k += 8) A::store8(y + 64 * w + k, means8(count, planes, nwords, m, w, k));
  unpack_mean_from<typename A::Scalar>(count, planes, n, 64 * full, m, yv);
}

// ---- Fused apply ---------------------------------------------------------------------------------
// Same operation order as lion_update(): round(x * factor), then round(x1 - lr * delta).
template <class A>
void lion_update8(typename A::Scalar::T* x, __m256 delta, const ApplyParams& a) {
  const __m256 x1 = A::round8(_mm256_mul_ps(A::load8(x), _mm256_set1_ps(a.factor)));
  A::store8(x, _mm256_sub_ps(x1, _mm256_mul_ps(_mm256_set1_ps(a.lr), delta)));
}

template <class A>
void apply_vote(void* xv, size_t n, const uint64_t* pos, const uint64_t* tie, const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<typename A::Scalar>(given);
  auto* x = static_cast<typename A::Scalar::T*>(xv);
  const size_t full = n / 64;
  for (size_t w = 0; w < full; ++w)
    for (int k = 0; k < 64; k += 8) lion_update8<A>(x + 64 * w + k, votes8(pos, tie, w, k), a);
  apply_vote_from<typename A::Scalar>(xv, n, 64 * full, pos, tie, a);
}

template <class A, int P>
void apply_mean_looked_up(void* xv, size_t n, const uint64_t* count, const MeanParams& m, const ApplyParams& a) {
  auto* x = static_cast<typename A::Scalar::T*>(xv);
  const size_t nwords = (n + 63) / 64, full = n / 64;
  const MeanTable table(P, m);
  for (size_t w = 0; w < full; ++w)
    for (int k = 0; k < 64; k += 8)
      lion_update8<A>(x + 64 * w + k, A::round8(means8_looked_up<P>(count, nwords, w, k, table)), a);
  apply_mean_from<typename A::Scalar>(xv, n, 64 * full, count, P, m, a);
}

template <class A>
void apply_mean(void* xv, size_t n, const uint64_t* count, int planes, const MeanParams& m,
                const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<typename A::Scalar>(given);
  if (with_fixed_planes<kMeanTablePlanes>(planes, [&](auto P) { apply_mean_looked_up<A, P()>(xv, n, count, m, a); })) {
    return;
  }
  auto* x = static_cast<typename A::Scalar::T*>(xv);
  const size_t nwords = (n + 63) / 64;
  const size_t full = mean_fits_int32(planes, m) ? n / 64 : 0;
  for (size_t w = 0; w < full; ++w)
    for (int k = 0; k < 64; k += 8)
      lion_update8<A>(x + 64 * w + k, A::round8(means8(count, planes, nwords, m, w, k)), a);
  apply_mean_from<typename A::Scalar>(xv, n, 64 * full, count, planes, m, a);
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
