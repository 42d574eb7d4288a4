#include "collectives/bits/packed_counts.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace pride::bits {
namespace {

using counts::CountCode;

// Bases up to this use tables (R <= 12 planes); larger ones (never chosen by the selector: their
// 32/k bits exceed their planes) take the definition as it is.
constexpr uint32_t kMaxTableBase = 4096;
constexpr int kMaxTablePlanes = 12;
constexpr int kMaxPieces = 32;
// The decode table's size: pieces of g digits, the most with B^g <= kPieceValues.
constexpr uint64_t kPieceValues = 4096;

// Tables for one base, built once per base a process uses.
//   encode: E(g) (count_coding.h) as four byte lookups, by[i][b] = Σ_j bit_j(b)·B^(8i+j) mod 2^32. The
//           sum is exact: it is E(g), below 2^32, and the wrapped entries are for bits g never has.
//   decode: a limb splits into pieces of g digits (the most with B^g <= kPieceValues, so that the
//           table stays in the L1 cache) by division by powers of S = B^g; piece → its digits as R
//           groups of g bits in one 64-bit entry, plane p's in a lane of 64/R bits. Piece i's entry
//           shifted by i·g lands every group in place at once: the P·g bits of a limb's pieces fit a
//           lane for every base the tables serve (checked when they are built).
struct Tables {
  explicit Tables(const CountCode& c) : code(c) {
    for (int i = 0; i < 4; ++i) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0, weight = 1;
        for (int j = 0; j < 8 * i; ++j) weight *= c.base;
        for (int j = 0; j < 8; ++j, weight *= c.base) v += ((b >> j) & 1u) * weight;
        by[i][b] = v;
      }
    }
    uint64_t span = c.base;
    piece_digits = 1;
    while (span * c.base <= kPieceValues && piece_digits < c.per_limb) {
      span *= c.base;
      ++piece_digits;
    }
    piece = counts::make_code(uint32_t(span));
    pieces = (c.per_limb + piece_digits - 1) / piece_digits;
    powers.resize(size_t(pieces));
    uint64_t power = 1;
    for (int i = 1; i < pieces; ++i) {  // S^i <= B^(k − 1) < 2^32 for i < pieces
      power *= span;
      powers[size_t(i)] = counts::make_code(uint32_t(power));
    }
    lane = 64 / c.planes;
    lanes_fit = pieces * piece_digits <= lane;
    digits.resize(span);
    for (uint32_t s = 0; s < span; ++s) {
      uint64_t entry = 0;
      uint32_t v = s;
      for (int j = 0; j < piece_digits; ++j, v /= c.base) {
        const uint32_t digit = v % c.base;
        for (int p = 0; p < c.planes; ++p) entry |= uint64_t((digit >> p) & 1u) << (p * lane + j);
      }
      digits[s] = entry;
    }
  }
  CountCode code;
  uint32_t by[4][256];
  CountCode piece;         // the code of base S = B^piece_digits: its divide() splits a limb
  int piece_digits = 1;
  int pieces = 1;
  std::vector<CountCode> powers;  // powers[i]: the code of base S^i, for ⌊v / S^i⌋ (i >= 1)
  int lane = 64;                  // bits per plane in a digits entry: 64 / R
  bool lanes_fit = true;          // a limb's pieces fit a lane (true for every base up to kMaxTableBase)
  std::vector<uint64_t> digits;   // piece → its digits, plane p's g bits at bit p·lane
};

const Tables& tables_for(const CountCode& c) {
  static std::mutex mutex;
  static std::map<uint32_t, std::unique_ptr<Tables>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& t = cache[c.base];
  if (!t) t = std::make_unique<Tables>(c);
  return *t;
}

// encode_counts for R planes, R fixed at compile time; E(g) takes as many byte lookups as k has bytes.
template <int R>
void encode_fixed(const Tables& t, const uint64_t* planes, size_t stride, size_t nwords, uint32_t* out) {
  const size_t nlimbs = counts::limbs_for_words(t.code, nwords);
  const int k = t.code.per_limb;
  for (size_t l = 0; l < nlimbs; ++l) {
    const size_t first = l * size_t(k);
    uint32_t v = 0;
    for (int p = 0; p < R; ++p) {
      const uint32_t g = counts::plane_bits(planes + size_t(p) * stride, nwords, first, k);
      uint32_t e = t.by[0][g & 255u] + t.by[1][(g >> 8) & 255u];
      if (k > 16) e += t.by[2][(g >> 16) & 255u] + t.by[3][g >> 24];
      v += e << p;
    }
    out[l] = v;
  }
}

template <int R = 1>
void encode_dispatch(const Tables& t, const uint64_t* planes, size_t stride, size_t nwords, uint32_t* out) {
  if constexpr (R < kMaxTablePlanes) {
    if (t.code.planes != R) return encode_dispatch<R + 1>(t, planes, stride, nwords, out);
  }
  encode_fixed<R>(t, planes, stride, nwords, out);
}

}  // namespace


void encode_counts(const CountCode& code, const uint64_t* planes, size_t stride, size_t nwords, uint32_t* out) {
  if (code.base > kMaxTableBase) {
    const size_t nlimbs = counts::limbs_for_words(code, nwords);
    for (size_t l = 0; l < nlimbs; ++l) out[l] = counts::encode_limb(code, planes, stride, nwords, l);
    return;
  }
  encode_dispatch(tables_for(code), planes, stride, nwords, out);
}

namespace {

// decode_counts for R planes, R fixed at compile time so that the groups and the words being filled
// stay in registers. The limb splits into its pieces through independent divisions (⌊v / S^i⌋ each
// with its own magic, rather than a chain of divisions by S), so the multiplies of one limb overlap.
// The words are filled as bit streams: a limb's k bits go after the previous limb's, and a word is
// stored once, when full.
// kPieces: a limb's pieces fixed at compile time too, so that the divisions and lookups of one limb
// unroll and their results stay in registers (2 … 5 pieces: every base the tables serve; kPieces = 0
// takes t.pieces at run time).
template <int R, int kPieces>
void decode_fixed(const Tables& t, const uint32_t* in, size_t nwords, uint64_t* planes, size_t stride) {
  const CountCode& c = t.code;
  const size_t nlimbs = counts::limbs_for_words(c, nwords);
  const int k = c.per_limb, g = t.piece_digits, P = kPieces > 0 ? kPieces : t.pieces, L = t.lane;
  const uint64_t limb_mask = (uint64_t(1) << k) - 1;
  const uint32_t span = t.piece.base;
  uint64_t acc[R] = {};
  int fill = 0;  // bits of the current word already in acc
  size_t w = 0;
  for (size_t l = 0; l < nlimbs; ++l) {
    const uint32_t v = in[l];
    uint32_t above[kMaxPieces + 1];  // above[i] = ⌊v / S^i⌋, independent of one another
    above[0] = v;
    for (int i = 1; i < P; ++i) above[i] = counts::divide(t.powers[size_t(i)], v);
    // The last piece is taken mod S too: a limb that was never written stays in its k digits.
    above[P] = counts::divide(t.piece, above[P - 1]);
    uint64_t lanes = 0;
    for (int i = 0; i < P; ++i) lanes |= t.digits[above[i] - above[i + 1] * span] << (i * g);
    uint64_t bits[R];
    for (int p = 0; p < R; ++p) {
      bits[p] = (lanes >> (p * L)) & limb_mask;  // a corrupt limb's last piece may carry digits past k
      acc[p] |= bits[p] << fill;
    }
    fill += k;
    if (fill >= 64) {
      fill -= 64;
      for (int p = 0; p < R; ++p) {
        planes[size_t(p) * stride + w] = acc[p];
        acc[p] = fill > 0 ? bits[p] >> (k - fill) : 0;
      }
      if (++w == nwords) return;
    }
  }
  if (fill > 0) {
    for (int p = 0; p < R; ++p) planes[size_t(p) * stride + w] = acc[p];
  }
}

template <int R = 1>
void decode_dispatch(const Tables& t, const uint32_t* in, size_t nwords, uint64_t* planes, size_t stride) {
  if constexpr (R < kMaxTablePlanes) {
    if (t.code.planes != R) return decode_dispatch<R + 1>(t, in, nwords, planes, stride);
  }
  switch (t.pieces) {
    case 2: return decode_fixed<R, 2>(t, in, nwords, planes, stride);
    case 3: return decode_fixed<R, 3>(t, in, nwords, planes, stride);
    case 4: return decode_fixed<R, 4>(t, in, nwords, planes, stride);
    case 5: return decode_fixed<R, 5>(t, in, nwords, planes, stride);
    default: return decode_fixed<R, 0>(t, in, nwords, planes, stride);
  }
}

}  // namespace

void decode_counts(const CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes, size_t stride) {
  const Tables* t = code.base <= kMaxTableBase ? &tables_for(code) : nullptr;
  if (t == nullptr || !t->lanes_fit) {
    const size_t nlimbs = counts::limbs_for_words(code, nwords);
    for (size_t w = 0; w < nwords; ++w) counts::decode_word(code, in, nlimbs, w, planes, stride);
    return;
  }
  decode_dispatch(*t, in, nwords, planes, stride);
}

}  // namespace pride::bits
