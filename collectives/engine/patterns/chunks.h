// How a buffer of `total` units (64-bit words of packed planes, or elements) is split among `parts`
// ranks: contiguous, in rank order, sizes differing by at most one. Pure arithmetic, tested alone.
#pragma once

#include <cstddef>

namespace pride::patterns {

struct Range {
  size_t begin = 0;
  size_t size = 0;
  size_t end() const { return begin + size; }
};

inline Range chunk(size_t total, int parts, int index) {
  size_t p = size_t(parts), i = size_t(index);
  size_t begin = total * i / p;  // floor(total*i/p): the first `total % p`-ish chunks come out shorter
  size_t end = total * (i + 1) / p;
  return {begin, end - begin};
}

// Where chunk `index` starts when every chunk is coded into bytes_of(its size) bytes (trits, packed
// counts: sizes that are not proportional to the chunk's) and the chunks lie back to back in rank
// order. chunk_offset(total, parts, parts, bytes_of) is the whole buffer's size.
template <class BytesOf>
size_t chunk_offset(size_t total, int parts, int index, BytesOf&& bytes_of) {
  size_t offset = 0;
  for (int i = 0; i < index; ++i) offset += bytes_of(chunk(total, parts, i).size);
  return offset;
}

}  // namespace pride::patterns
