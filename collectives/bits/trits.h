// The trit coding of trit_coding.h on the CPU: what the direct algorithm sends for a vote result that
// can tie, when the cost model or PRIDE_RESULT_CODING chooses it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/trit_coding.h"

namespace pride::bits {

// out[trits::bytes_for_words(nwords)] from the pos and tie planes of nwords words.
void encode_trits(const uint64_t* pos, const uint64_t* tie, size_t nwords, uint8_t* out);
// The planes back from those bytes: every bit of every word as encode_trits saw it.
void decode_trits(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie);

}  // namespace pride::bits
