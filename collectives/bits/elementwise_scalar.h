// Element kernels one element at a time: the whole portable path, and the tails (the elements from
// a multiple of 64 to n) of the AVX2 path. Every function starts at element `begin`, a multiple of 64.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

inline bool bit_at(const uint64_t* plane, size_t i) { return (plane[i / 64] >> (i % 64)) & 1u; }

// kBitLanes<T>.lanes[b]: lane i holds bit i of the byte b as 0 or 1 in type T (8 KiB for 32-bit T,
// stays in L1 while a kernel runs). Kernels read 8 elements' bits through it as contiguous values,
// which vectorize, instead of a variable shift per element: int32 lanes (AVX2 gathers counts from
// them), float lanes (the portable vote kernels compute with them directly), and lanes of a 16- or
// 8-bit output's width (the portable vote kernels select its bit patterns with them).
template <class T>
struct BitLaneTable {
  alignas(32) T lanes[256][8];
  constexpr BitLaneTable() : lanes() {
    for (int b = 0; b < 256; ++b)
      for (int i = 0; i < 8; ++i) lanes[b][i] = T((b >> i) & 1);
  }
};
template <class T>
inline constexpr BitLaneTable<T> kBitLanes{};

// Writes whole words up to words_for(n), so the bits past n come out zero.
template <class Tr>
void pack_binary_from(const void* xv, size_t n, size_t begin, uint64_t* plane) {
  const auto* x = static_cast<const typename Tr::T*>(xv);
  for (size_t base = begin; base < n; base += 64) {
    const size_t count = n - base < 64 ? n - base : 64;
    uint64_t word = 0;
    for (size_t i = 0; i < count; ++i) word |= uint64_t{Tr::pos(x[base + i])} << i;
    plane[base / 64] = word;
  }
}

template <class Tr>
void pack_ternary_from(const void* xv, size_t n, size_t begin, uint64_t* pos, uint64_t* neg) {
  const auto* x = static_cast<const typename Tr::T*>(xv);
  for (size_t base = begin; base < n; base += 64) {
    const size_t count = n - base < 64 ? n - base : 64;
    uint64_t p = 0, m = 0;
    for (size_t i = 0; i < count; ++i) {
      p |= uint64_t{Tr::pos(x[base + i])} << i;
      m |= uint64_t{Tr::neg(x[base + i])} << i;
    }
    pos[base / 64] = p;
    neg[base / 64] = m;
  }
}

// The vote of element i as a float: +1 where pos, else 0 where tie, else -1. Integer arithmetic, not
// branches: vote bits are as good as random, and a mispredicted branch per element made the portable
// unpack 20× slower than memcpy.
inline float vote_at(const uint64_t* pos, const uint64_t* tie, size_t i) {
  const int p = bit_at(pos, i), t = tie ? bit_at(tie, i) : 0;
  return static_cast<float>(p - (1 - p) * (1 - t));
}

template <class Tr>
void unpack_vote_from(const uint64_t* pos, const uint64_t* tie, size_t n, size_t begin, void* yv) {
  auto* y = static_cast<typename Tr::T*>(yv);
  for (size_t i = begin; i < n; ++i) y[i] = Tr::from_f32(vote_at(pos, tie, i));
}

// The mean of element i in float32: the count's value u gathered from its planes, then
// s = scale * u - offset and float(s) / float(nranks), one correctly rounded division.
inline float mean_at(const uint64_t* count, int planes, size_t nwords, const MeanParams& m, size_t i) {
  uint64_t u = 0;
  for (int p = 0; p < planes; ++p) u |= uint64_t{bit_at(count + p * nwords, i)} << p;
  const int64_t s = m.scale * static_cast<int64_t>(u) - m.offset;
  return static_cast<float>(s) / m.nranks;
}

template <class Tr>
void unpack_mean_from(const uint64_t* count, int planes, size_t n, size_t begin, const MeanParams& m, void* yv) {
  auto* y = static_cast<typename Tr::T*>(yv);
  const size_t nwords = (n + 63) / 64;
  for (size_t i = begin; i < n; ++i) y[i] = Tr::from_f32(mean_at(count, planes, nwords, m, i));
}

// torch keeps mul_'s scalar in float32 but rounds add_'s alpha to the tensor's dtype first; the
// apply kernels take lr through this so that bf16/fp16 steps match p.add_(delta, alpha=-lr).
template <class Tr>
ApplyParams with_dtype_lr(const ApplyParams& a) {
  return {a.factor, Tr::to_f32(Tr::from_f32(a.lr))};
}

// x1 = round(x * factor); x2 = round(x1 - lr * delta), each operation in float32 and each result
// rounded to the dtype, like torch's p.mul_(factor).add_(delta, alpha=-lr) on that dtype.
template <class Tr>
typename Tr::T lion_update(typename Tr::T x, float delta, const ApplyParams& a) {
  const float x1 = Tr::to_f32(Tr::from_f32(Tr::to_f32(x) * a.factor));
  const float step = a.lr * delta;
  return Tr::from_f32(x1 - step);
}

template <class Tr>
void apply_vote_from(void* xv, size_t n, size_t begin, const uint64_t* pos, const uint64_t* tie,
                     const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<Tr>(given);
  auto* x = static_cast<typename Tr::T*>(xv);
  for (size_t i = begin; i < n; ++i) x[i] = lion_update<Tr>(x[i], vote_at(pos, tie, i), a);
}

// delta is the mean rounded to the dtype first, as if unpack_mean had produced a delta tensor.
template <class Tr>
void apply_mean_from(void* xv, size_t n, size_t begin, const uint64_t* count, int planes, const MeanParams& m,
                     const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<Tr>(given);
  auto* x = static_cast<typename Tr::T*>(xv);
  const size_t nwords = (n + 63) / 64;
  for (size_t i = begin; i < n; ++i) {
    const float delta = Tr::to_f32(Tr::from_f32(mean_at(count, planes, nwords, m, i)));
    x[i] = lion_update<Tr>(x[i], delta, a);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
