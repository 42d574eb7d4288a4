// The count coding of count_coding.h on the CPU: what the direct algorithm sends for a mean-mode
// result when the cost model or PRIDE_RESULT_CODING chooses it. Both give exactly the limbs and
// planes the header's definition gives; lookup tables make them fast.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/count_coding.h"

namespace pride::bits {

// out[counts::limbs_for_words(code, nwords)] from code.planes planes of nwords words, `stride` words apart.
void encode_counts(const counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                   uint32_t* out);
// The planes back from those limbs: every bit of every word as encode_counts saw it.
void decode_counts(const counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                   size_t stride);

}  // namespace pride::bits
