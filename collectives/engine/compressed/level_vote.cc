#include "collectives/engine/compressed/level_vote.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "backend/common/error.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/patterns/peer_exchange.h"

namespace pride {
namespace {

using patterns::chunk;
using patterns::Range;

enum Scratch : uint32_t { kShards, kInbox, kSum, kResults };

uint64_t* scratch(Workspace& ws, Scratch what, size_t words) {
  return ws.get<uint64_t>({kLevelVoteOp, uint32_t(what)}, words);
}

// The elements of word range `words`, clipped to numel.
Range elements_of(const Range& words, size_t numel) {
  const size_t begin = std::min(words.begin * 64, numel), end = std::min(words.end() * 64, numel);
  return {begin, end - begin};
}

// The first rank whose values are out of range, agreed inside the fingerprint check (INT_MAX: none).
struct FirstOutOfRange {
  int32_t rank;
  CheckPayload payload;

  FirstOutOfRange(int32_t mine) : rank(mine) {
    payload.data = &rank;
    payload.bytes = sizeof rank;
    payload.combine = [](void* dst, const void* lower, const void* upper) {
      int32_t a, b;
      std::memcpy(&a, lower, sizeof a);
      std::memcpy(&b, upper, sizeof b);
      const int32_t first = std::min(a, b);
      std::memcpy(dst, &first, sizeof first);
    };
  }
};

}  // namespace

double level_vote_wire_bits(int size, int max_level) {
  return double(size - 1) / double(size) * double(bits::level_planes(max_level) + 2);
}

void level_vote(Communicator& comm, int8_t* q, size_t numel, int max_level) {
  const int n = comm.size(), r = comm.rank();
  // Every check is made after the ranks compare their calls, so that all of them raise together.
  const bool valid_level = max_level >= 1 && max_level <= 127;
  const bool within = valid_level && bits::levels_within(q, numel, max_level);
  FirstOutOfRange bad(within ? INT32_MAX : r);
  Collective c = comm.begin("level_vote", "level_direct",
                            Fingerprint{0, kLevelVoteOp, uint32_t(bits::DType::kInt8), numel, uint64_t(max_level),
                                        &describe_call},
                            &bad.payload);
  if (!bad.payload.reduced) bad.rank = within ? INT32_MAX : r;  // no check ran: only this rank knows
  PRIDE_CHECK_ARG(valid_level, "pride level_vote (rank {}/{}): max_level must be in [1, 127], got {}", r, n,
                  max_level);
  PRIDE_CHECK_ARG(bad.rank == INT32_MAX,
                  "pride level_vote (rank {}/{}): rank {} has values outside [-{}, {}] (the sum of {} ranks "
                  "must stay within the levels it was given)",
                  r, n, bad.rank, max_level, max_level, n);
  if (numel == 0) return;
  const size_t W = bits::words_for(numel);
  const size_t P = size_t(bits::level_planes(max_level));
  Workspace& ws = c.workspace();

  // 1. Every chunk's planes, chunk-major: chunk j's message is P planes of its words at P·begin_j.
  uint64_t* shards = scratch(ws, kShards, P * W);
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j), elements = elements_of(words, numel);
    bits::pack_levels(q + elements.begin, elements.size, max_level, shards + P * words.begin);
  }

  // 2. All-to-all: my chunk's planes from every rank.
  const Range mine = chunk(W, n, r);
  const size_t message_words = P * mine.size;
  uint64_t* inbox = scratch(ws, kInbox, size_t(n) * message_words);
  patterns::send_to_owners(c, 0, inbox, message_words * 8, [&](int to) {
    const Range words = chunk(W, n, to);
    return std::pair<const void*, size_t>(shards + P * words.begin, P * words.size * 8);
  });
  std::memcpy(inbox + size_t(r) * message_words, shards + P * mine.begin, message_words * 8);

  // 3. The owner: U = Σ (q_i + s) in a counter wide enough for N·2s, then sign(U − N·s) as a +1 plane
  //    and a tie plane (vote_from_count with N·2s "votes" compares U with their half).
  const int64_t votes = int64_t(n) * 2 * max_level;
  const int K = bits::planes_for(votes);
  uint64_t* sum = scratch(ws, kSum, size_t(K) * mine.size);
  std::fill(sum, sum + size_t(K) * mine.size, 0);
  for (int i = 0; i < n; ++i) {
    bits::counter_add(sum, K, inbox + size_t(i) * message_words, int(P), mine.size);
  }
  // Results chunk-major like the shards: chunk j's +1 plane then its tie plane, at 2·begin_j.
  uint64_t* results = scratch(ws, kResults, 2 * W);
  uint64_t* my_result = results + 2 * mine.begin;
  bits::vote_from_count(sum, K, mine.size, votes, my_result, my_result + mine.size);

  // 4. All-gather of the owners' planes, then every chunk unpacked into q.
  patterns::exchange_with_peers(
      c, 1,
      [&](int from) {
        const Range words = chunk(W, n, from);
        return std::pair<void*, size_t>(results + 2 * words.begin, 2 * words.size * 8);
      },
      [&](int) { return std::pair<const void*, size_t>(my_result, 2 * mine.size * 8); });
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j), elements = elements_of(words, numel);
    const uint64_t* pos = results + 2 * words.begin;
    bits::unpack_vote(pos, pos + words.size, elements.size, q + elements.begin, bits::DType::kInt8);
  }
}

}  // namespace pride
