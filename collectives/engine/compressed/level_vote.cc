#include "collectives/engine/compressed/level_vote.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "collectives/bits/count_coding.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"
#include "collectives/bits/packed_counts.h"
#include "collectives/bits/trit_coding.h"
#include "collectives/bits/trits.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/patterns/peer_exchange.h"
#include "collectives/engine/sign/selector.h"

namespace pride {
namespace {

using patterns::chunk;
using patterns::Range;

enum Scratch : uint32_t { kShards, kInbox, kSum, kResults, kCodedShards, kDecoded, kCodedResults };

uint64_t* scratch(Workspace& ws, Scratch what, size_t words) {
  return ws.get<uint64_t>({kLevelVoteOp, uint32_t(what)}, words);
}

// The elements of word range `words`, clipped to numel.
Range elements_of(const Range& words, size_t numel) {
  const size_t begin = std::min(words.begin * 64, numel), end = std::min(words.end() * 64, numel);
  return {begin, end - begin};
}

// A result's +1 and tie planes as trits, five to a byte.
constexpr double kTritBits = 8.0 / double(bits::trits::kPerByte);

// The code of the levels u = q + s: a count of 2s + 1 values.
bits::counts::CountCode level_code(int max_level) { return bits::counts::make_code(uint32_t(2 * max_level + 1)); }

// Bytes of chunk j's coded levels, and where it starts among the chunks (chunk-major; limbs keep every
// start a multiple of 4 bytes).
size_t level_bytes(const bits::counts::CountCode& code, size_t W, int n, int j) {
  return bits::counts::bytes_for_words(code, chunk(W, n, j).size);
}
size_t level_offset(const bits::counts::CountCode& code, size_t W, int n, int j) {
  return patterns::chunk_offset(W, n, j, [&](size_t words) { return bits::counts::bytes_for_words(code, words); });
}
size_t trit_offset(size_t W, int n, int j) {
  return patterns::chunk_offset(W, n, j, bits::trits::bytes_for_words);
}

// The first rank whose check of its values failed (a GPU's out of memory or launch error), else the
// first whose values are out of range, agreed inside the fingerprint check in one int32: a failure is
// its rank, an out-of-range rank r is kOutOfRange + r, and kNone is neither; the least code wins.
struct FirstBadRank {
  static constexpr int32_t kOutOfRange = int32_t(1) << 30, kNone = INT32_MAX;
  int32_t code;
  CheckPayload payload;

  static int32_t code_of(int rank, bool failed, bool out_of_range) {
    return failed ? rank : out_of_range ? kOutOfRange + rank : kNone;
  }
  explicit FirstBadRank(int32_t mine) : code(mine) {
    payload.data = &code;
    payload.bytes = sizeof code;
    payload.combine = [](void* dst, const void* lower, const void* upper) {
      int32_t a, b;
      std::memcpy(&a, lower, sizeof a);
      std::memcpy(&b, upper, sizeof b);
      const int32_t first = std::min(a, b);
      std::memcpy(dst, &first, sizeof first);
    };
  }
  int32_t failed() const { return code < kOutOfRange ? code : kNone; }
  int32_t out_of_range() const { return code >= kOutOfRange && code != kNone ? code - kOutOfRange : kNone; }
};

}  // namespace

LevelCoding select_level_coding(int size, int max_level, size_t numel, int num_nodes, double ranks_per_core) {
  LevelCoding coding;
  if (size < 2 || max_level < 1 || max_level > 127) return coding;
  const double level_saving = bits::level_planes(max_level) - bits::counts::bits_per_element(level_code(max_level));
  const double trit_saving = 2.0 - kTritBits;
  const std::string& setting = Settings::get().result_coding;
  if (setting != "auto") {
    coding.packed_levels = level_saving > 0 && (setting == "counts" || setting == "packed");
    coding.trit_results = setting == "trits" || setting == "packed";
    return coding;
  }
  // As select_result_coding: the wire time saved on the cost model's link against the CPU time of the
  // coding, charged in full. A rank's (N − 1)/N of the tensor crosses a link, the bytes of a node's
  // ranks through the node's one link.
  const LinkModel link = LinkModel::for_group(num_nodes, ranks_per_core);
  const int nodes = std::clamp(num_nodes, 1, size);
  const double link_sharers = nodes > 1 ? double(size / nodes) : 1.0;
  const double crossing = double(numel) * (size - 1) / size * link_sharers / 8 / link.bytes_per_us;
  // Trits: the owner encodes its chunk and decodes the others', the whole tensor. Levels: a rank
  // encodes the others' chunks and decodes the others' shards of its own, (N − 1)/N of the tensor each.
  const double trit_us = double(numel) * kTritCodingNsPerElement * ranks_per_core / 1000;
  const double level_us = double(numel) * (size - 1) / size * kCountCodingNsPerBit *
                          std::log2(2.0 * max_level + 1) * ranks_per_core / 1000;
  coding.trit_results = coding_pays(crossing * trit_saving, trit_us);
  coding.packed_levels = level_saving > 0 && coding_pays(crossing * level_saving, level_us);
  return coding;
}

double level_vote_wire_bits(int size, int max_level, const LevelCoding& coding) {
  const double levels = coding.packed_levels ? bits::counts::bits_per_element(level_code(max_level))
                                             : double(bits::level_planes(max_level));
  const double results = coding.trit_results ? kTritBits : 2.0;
  return double(size - 1) / double(size) * (levels + results);
}

void level_vote(Communicator& comm, int8_t* q, size_t numel, int max_level) {
  HostLevelOps ops(q, numel);
  level_vote(comm, ops, numel, max_level);
}

void level_vote(Communicator& comm, LevelOps& ops, size_t numel, int max_level) {
  const int n = comm.size(), r = comm.rank();
  // Every check is made after the ranks compare their calls, so that all of them raise together.
  // The check may do device work (a GPU's LevelOps packs there too) and fail; that rank's error is
  // raised after the comparison, and every other rank raises with it instead of waiting for it.
  const bool valid_level = max_level >= 1 && max_level <= 127;
  bool within = false;
  std::exception_ptr check_failed;
  try {
    within = valid_level && (numel == 0 || ops.within(max_level));
  } catch (...) {
    check_failed = std::current_exception();
  }
  const int32_t my_code = FirstBadRank::code_of(r, bool(check_failed), valid_level && !within);
  FirstBadRank bad(my_code);
  const LevelCoding coding = select_level_coding(n, max_level, numel, comm.num_nodes(), comm.ranks_per_core());
  // The level in the low 32 bits (a negative one must not reach the flag bits above them).
  const uint64_t detail = uint64_t(uint32_t(max_level)) | (coding.packed_levels ? kFingerprintCountResults : 0) |
                          (coding.trit_results ? kFingerprintTritResults : 0);
  Collective c = comm.begin("level_vote", "level_direct",
                            Fingerprint{0, kLevelVoteOp, uint32_t(bits::DType::kInt8), numel, detail, &describe_call},
                            &bad.payload);
  if (!bad.payload.reduced) bad.code = my_code;  // no check ran: only this rank knows
  if (check_failed) std::rethrow_exception(check_failed);
  PRIDE_ENFORCE(bad.failed() == FirstBadRank::kNone,
                "pride level_vote (rank {}/{}): rank {} failed to check its values (its own error says why); "
                "nothing was sent",
                r, n, bad.failed());
  PRIDE_CHECK_ARG(valid_level, "pride level_vote (rank {}/{}): max_level must be in [1, 127], got {}", r, n,
                  max_level);
  PRIDE_CHECK_ARG(bad.out_of_range() == FirstBadRank::kNone,
                  "pride level_vote (rank {}/{}): rank {} has values outside [-{}, {}] (the sum of {} ranks "
                  "must stay within the levels it was given)",
                  r, n, bad.out_of_range(), max_level, max_level, n);
  if (numel == 0) return;
  const size_t W = bits::words_for(numel);
  const size_t P = size_t(bits::level_planes(max_level));
  Workspace& ws = c.workspace();

  // 1. Every chunk's planes, chunk-major: chunk j's message is P planes of its words at P·begin_j.
  uint64_t* shards = scratch(ws, kShards, P * W);
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j), elements = elements_of(words, numel);
    ops.pack(max_level, elements, shards + P * words.begin);
  }

  // 2. All-to-all: my chunk's planes from every rank (or their coded bytes: one message per chunk,
  //    chunk-major like the planes).
  const Range mine = chunk(W, n, r);
  const size_t message_words = P * mine.size;
  const bits::counts::CountCode code = level_code(max_level);
  uint8_t* coded = nullptr;
  size_t message_bytes = message_words * 8;
  if (coding.packed_levels) {
    coded = reinterpret_cast<uint8_t*>(scratch(ws, kCodedShards, (level_offset(code, W, n, n) + 7) / 8));
    for (int j = 0; j < n; ++j) {
      const Range words = chunk(W, n, j);
      if (j != r) {
        bits::encode_counts(code, shards + P * words.begin, words.size, words.size,
                            reinterpret_cast<uint32_t*>(coded + level_offset(code, W, n, j)));
      }
    }
    message_bytes = level_bytes(code, W, n, r);
  }
  uint64_t* inbox = scratch(ws, kInbox, (size_t(n) * message_bytes + 7) / 8);
  patterns::send_to_owners(c, 0, inbox, message_bytes, [&](int to) {
    const Range words = chunk(W, n, to);
    if (coded != nullptr) {
      return std::pair<const void*, size_t>(coded + level_offset(code, W, n, to), level_bytes(code, W, n, to));
    }
    return std::pair<const void*, size_t>(shards + P * words.begin, P * words.size * 8);
  });

  // 3. The owner: U = Σ (q_i + s) in a counter wide enough for N·2s, then sign(U − N·s) as a +1 plane
  //    and a tie plane (vote_from_count with N·2s "votes" compares U with their half).
  const int64_t votes = int64_t(n) * 2 * max_level;
  const int K = bits::planes_for(votes);
  uint64_t* sum = scratch(ws, kSum, size_t(K) * mine.size);
  std::fill(sum, sum + size_t(K) * mine.size, 0);
  uint64_t* decoded = coded != nullptr ? scratch(ws, kDecoded, message_words) : nullptr;
  for (int i = 0; i < n; ++i) {
    const uint64_t* planes = shards + P * mine.begin;  // my own shard, never sent
    if (i != r && coded != nullptr) {
      bits::decode_counts(code, reinterpret_cast<const uint32_t*>(reinterpret_cast<const uint8_t*>(inbox) +
                                                                  size_t(i) * message_bytes),
                          mine.size, decoded, mine.size);
      planes = decoded;
    } else if (i != r) {
      planes = inbox + size_t(i) * message_words;
    }
    bits::counter_add(sum, K, planes, int(P), mine.size);
  }
  // Results chunk-major like the shards: chunk j's +1 plane then its tie plane, at 2·begin_j.
  uint64_t* results = scratch(ws, kResults, 2 * W);
  uint64_t* my_result = results + 2 * mine.begin;
  bits::vote_from_count(sum, K, mine.size, votes, my_result, my_result + mine.size);

  // 4. All-gather of the owners' planes (or their trits), then every chunk unpacked into q.
  if (coding.trit_results) {
    uint8_t* trits = reinterpret_cast<uint8_t*>(scratch(ws, kCodedResults, (trit_offset(W, n, n) + 7) / 8));
    bits::encode_trits(my_result, my_result + mine.size, mine.size, trits + trit_offset(W, n, r));
    patterns::exchange_with_peers(
        c, 1,
        [&](int from) {
          return std::pair<void*, size_t>(trits + trit_offset(W, n, from),
                                          bits::trits::bytes_for_words(chunk(W, n, from).size));
        },
        [&](int) {
          return std::pair<const void*, size_t>(trits + trit_offset(W, n, r), bits::trits::bytes_for_words(mine.size));
        });
    for (int j = 0; j < n; ++j) {
      const Range words = chunk(W, n, j);
      if (j == r) continue;
      uint64_t* pos = results + 2 * words.begin;
      bits::decode_trits(trits + trit_offset(W, n, j), words.size, pos, pos + words.size);
    }
  } else {
    patterns::exchange_with_peers(
        c, 1,
        [&](int from) {
          const Range words = chunk(W, n, from);
          return std::pair<void*, size_t>(results + 2 * words.begin, 2 * words.size * 8);
        },
        [&](int) { return std::pair<const void*, size_t>(my_result, 2 * mine.size * 8); });
  }
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j), elements = elements_of(words, numel);
    const uint64_t* pos = results + 2 * words.begin;
    ops.unpack(pos, pos + words.size, elements);
  }
}

}  // namespace pride
