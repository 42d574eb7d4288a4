// Mean mode's result counts packed in base B (SPEC §4, issue 15 item 5), the trits' trick for counts:
// a count of B values (binary mean: c = 0 … N, B = N + 1; ternary mean: u = 0 … 2N, B = 2N + 1) takes
// planes_for(B − 1) whole planes, but carries only log2(B) bits. N = 4: 3 planes for 2.32 bits.
//
// The code: 32-bit limbs (little-endian on the wire), each holding the k consecutive counts of k
// elements, k the most with B^k <= 2^32, as the base-B number d0 + d1·B + … + d(k−1)·B^(k−1), the
// first element the least significant digit. A range of nwords plane words (64·nwords elements, bits
// past the tensor's end included) takes limbs_for_words(nwords) limbs; a range that does not start at
// a multiple of k elements is coded on its own, not as a slice of a larger encoding. 32/k bits per
// element: N = 4, B = 5, k = 13: 2.46 bits instead of 3 planes; B = 9 (N = 8): 3.2 instead of 4.
// 32-bit limbs, not 64-bit ones, keep decoding to one 64×64 multiply per digit (below) and to the
// 32-bit integers a GPU does natively; they cost density only for a few bases (B = 5: 2.46, not 2.37).
//
// Header-only so that the CPU (packed_counts.cc, which adds lookup tables) and the GPU
// (cuda/packed_count_kernels.cu) share one definition. The definition's arithmetic, written so that
// nothing overflows:
//   encode: the limb is Σ_p 2^p · E(g_p), where g_p is the k bits of plane p for the limb's elements
//           and E(g) = Σ_j bit_j(g)·B^j. Every term is at most the limb, which is below B^k <= 2^32.
//   decode: k times digit = v mod B, v = v / B, with v / B = ⌊magic·v / 2^64⌋ for every 32-bit v,
//           magic = ⌊(2^64 − 1)/B⌋ + 1 (Lemire, Kaser, Kurz 2019, "Faster remainder by direct
//           computation": exact where B <= 2^32). A limb that was never written (corrupt input) still
//           decodes to k digits below B, so no bit lands outside the R planes or the range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/host_device.h"

namespace pride::bits::counts {

constexpr int kMaxPlanes = 32;  // a 32-bit base's counts

struct CountCode {
  uint32_t base = 2;   // B: every count is 0 … B − 1
  int planes = 1;      // R = planes_for(B − 1): the planes the counts occupy
  int per_limb = 32;   // k: counts per 32-bit limb, the most with B^k <= 2^32
  uint64_t magic = 0;  // ⌊(2^64 − 1)/B⌋ + 1
};

PRIDE_HD constexpr CountCode make_code(uint32_t base) {
  CountCode c{};
  c.base = base < 2 ? 2 : base;
  c.planes = 0;
  while (c.planes < 32 && (uint64_t(1) << c.planes) < c.base) ++c.planes;  // 2^R >= B: B − 1 fits R bits
  c.per_limb = 0;
  for (uint64_t power = c.base; power <= (uint64_t(1) << 32); power *= c.base) ++c.per_limb;
  c.magic = ~uint64_t(0) / c.base + 1;
  return c;
}

PRIDE_HD constexpr size_t limbs_for_words(const CountCode& c, size_t nwords) {
  return (nwords * 64 + size_t(c.per_limb) - 1) / size_t(c.per_limb);
}
PRIDE_HD constexpr size_t bytes_for_words(const CountCode& c, size_t nwords) {
  return 4 * limbs_for_words(c, nwords);
}
// What the code costs on the wire per element, against c.planes for the planes themselves.
PRIDE_HD constexpr double bits_per_element(const CountCode& c) { return 32.0 / c.per_limb; }

// ⌊v / B⌋ for any 32-bit v.
PRIDE_HD inline uint32_t divide(const CountCode& c, uint32_t v) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__umul64hi(c.magic, v));
#else
  return uint32_t((static_cast<unsigned __int128>(c.magic) * v) >> 64);
#endif
}

// `count` bits (<= 32) of a plane of nwords words from element `first` on; elements past the plane read 0.
PRIDE_HD inline uint32_t plane_bits(const uint64_t* plane, size_t nwords, size_t first, int count) {
  const size_t w = first / 64, o = first % 64;
  if (w >= nwords) return 0;
  uint64_t v = plane[w] >> o;
  if (o + size_t(count) > 64 && w + 1 < nwords) v |= plane[w + 1] << (64 - o);
  return uint32_t(v & ((uint64_t(1) << count) - 1));
}

// E(g): the bits of g as base-B digits.
PRIDE_HD inline uint32_t digits_value(const CountCode& c, uint32_t g) {
  uint32_t v = 0;
  for (int j = c.per_limb - 1; j >= 0; --j) v = v * c.base + ((g >> j) & 1u);
  return v;
}

// Limb `limb` of the R planes (`stride` words apart, nwords words each).
PRIDE_HD inline uint32_t encode_limb(const CountCode& c, const uint64_t* planes, size_t stride, size_t nwords,
                                           size_t limb) {
  const size_t first = limb * size_t(c.per_limb);
  uint32_t v = 0;
  for (int p = 0; p < c.planes; ++p) {
    v += digits_value(c, plane_bits(planes + size_t(p) * stride, nwords, first, c.per_limb)) << p;
  }
  return v;
}

// The limb's k counts back as R groups of k bits: groups[p] bit j is bit p of digit j.
PRIDE_HD inline void decode_limb(const CountCode& c, uint32_t v, uint32_t* groups) {
  for (int p = 0; p < c.planes; ++p) groups[p] = 0;
  for (int j = 0; j < c.per_limb; ++j) {
    const uint32_t q = divide(c, v), digit = v - q * c.base;
    v = q;
    for (int p = 0; p < c.planes; ++p) groups[p] |= ((digit >> p) & 1u) << j;
  }
}

// Word w of every plane from the limbs of the whole range, each plane's word to planes[p · stride + w].
// Every limb that holds one of the word's elements contributes.
PRIDE_HD inline void decode_word(const CountCode& c, const uint32_t* limbs, size_t nlimbs, size_t w,
                                       uint64_t* planes, size_t stride) {
  const size_t first = w * 64, k = size_t(c.per_limb);
  uint64_t word[kMaxPlanes];
  for (int p = 0; p < c.planes; ++p) word[p] = 0;
  uint32_t groups[kMaxPlanes];
  for (size_t l = first / k; l < nlimbs && l * k < first + 64; ++l) {
    decode_limb(c, limbs[l], groups);
    const size_t at = l * k;  // the limb's first element; may precede the word by up to k − 1
    for (int p = 0; p < c.planes; ++p) {
      word[p] |= at >= first ? uint64_t(groups[p]) << (at - first) : uint64_t(groups[p]) >> (first - at);
    }
  }
  for (int p = 0; p < c.planes; ++p) planes[size_t(p) * stride + w] = word[p];
}

}  // namespace pride::bits::counts

