// Vote results that can tie, as trits five to a byte (3^5 = 243 <= 256): 1.6 bits per element instead
// of the two planes' 2 (SPEC §4, issue 15 item 5). A vote that can tie has three outcomes per element,
// +1 (pos bit), 0 (tie bit) and −1 (neither); SignPlan::finalize never sets both bits of one element.
//
// Digit of element e: 2 where pos, 1 where tie, 0 otherwise. Byte b holds elements 5b … 5b+4 as
// d0 + 3·d1 + 9·d2 + 27·d3 + 81·d4. A range of nwords plane words (64·nwords elements, bits past the
// tensor's end included, so that decoding gives back every bit of every word) takes
// trit_bytes(nwords) bytes; the bytes of a word range that does not start at a multiple of 5 words
// are that range's own, not a slice of a larger encoding.
//
// Header-only so that the CPU (trits.cc) and the GPU (cuda/trit_kernels.cu) share one definition of
// the code: a byte and a pair of 5-bit groups map to each other through the same arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/host_device.h"

namespace pride::bits::trits {

constexpr size_t kPerByte = 5;
PRIDE_HD constexpr size_t bytes_for_words(size_t nwords) { return (nwords * 64 + kPerByte - 1) / kPerByte; }

// The byte for five elements: bit k of pos5 / tie5 is element k's pos / tie bit.
PRIDE_HD constexpr uint8_t encode5(uint32_t pos5, uint32_t tie5) {
  uint32_t byte = 0;
  for (int k = 4; k >= 0; --k) {
    const uint32_t digit = (pos5 >> k) & 1u ? 2u : ((tie5 >> k) & 1u);
    byte = byte * 3u + digit;
  }
  return uint8_t(byte);
}

// The inverse: pos5 | tie5 << 5 of a byte. Bytes 243 … 255 are never written; they decode as the
// digits their base-3 expansion gives (all five digits are taken mod 3), so corrupt input cannot
// read out of bounds.
PRIDE_HD constexpr uint32_t decode5(uint8_t byte) {
  uint32_t value = byte, pos5 = 0, tie5 = 0;
  for (int k = 0; k < 5; ++k) {
    const uint32_t digit = value % 3u;
    value /= 3u;
    pos5 |= uint32_t(digit == 2u) << k;
    tie5 |= uint32_t(digit == 1u) << k;
  }
  return pos5 | tie5 << 5;
}

// Five bits of a plane of nwords words starting at element `first` (elements past the plane read 0).
PRIDE_HD inline uint32_t bits5(const uint64_t* plane, size_t nwords, size_t first) {
  const size_t w = first / 64, o = first % 64;
  uint64_t v = plane[w] >> o;
  if (o > 64 - kPerByte && w + 1 < nwords) v |= plane[w + 1] << (64 - o);
  return uint32_t(v & 31u);
}

// Word w of the pos and tie planes from the bytes of the whole range (`table`: decode5 of every byte,
// or null to compute it). Every byte that holds one of the word's elements contributes.
PRIDE_HD inline void decode_word(const uint8_t* bytes, size_t nbytes, size_t w, const uint32_t* table,
                                      uint64_t* pos, uint64_t* tie) {
  const size_t first = w * 64;
  uint64_t p = 0, t = 0;
  for (size_t b = first / kPerByte; b < nbytes && b * kPerByte < first + 64; ++b) {
    const uint32_t both = table != nullptr ? table[bytes[b]] : decode5(bytes[b]);
    const uint64_t p5 = both & 31u, t5 = both >> 5;
    const size_t at = b * kPerByte;  // the byte's first element; may precede the word by up to 4
    if (at >= first) {
      p |= p5 << (at - first);
      t |= t5 << (at - first);
    } else {
      p |= p5 >> (first - at);
      t |= t5 >> (first - at);
    }
  }
  *pos = p;
  *tie = t;
}

}  // namespace pride::bits::trits
