#include "collectives/engine/compressed/onebit_allreduce.h"

#include <cstring>
#include <utility>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/bits/onebit.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/patterns/peer_exchange.h"

namespace pride {
namespace {

using patterns::chunk;
using patterns::Range;

enum Scratch : uint32_t { kShards, kInbox, kResults };  // and 100: HostOnebitOps's z (onebit_ops.cc)

uint64_t* scratch(Workspace& ws, Scratch what, size_t words) {
  return ws.get<uint64_t>({kOnebitAllreduceOp, uint32_t(what)}, words);
}

// A message is a chunk's sign words followed by one word holding the float scale, so chunk j of a
// chunk-major buffer starts at word begin_j + j.
size_t message_offset(const Range& words, int j) { return words.begin + size_t(j); }

void put_scale(uint64_t* word, float scale) {
  *word = 0;
  std::memcpy(word, &scale, sizeof scale);
}

float get_scale(const uint64_t* word) {
  float scale;
  std::memcpy(&scale, word, sizeof scale);
  return scale;
}

// The elements of word range `words`, clipped to numel.
Range elements_of(const Range& words, size_t numel) {
  const size_t begin = std::min(words.begin * 64, numel), end = std::min(words.end() * 64, numel);
  return {begin, end - begin};
}

}  // namespace

patterns::Range onebit_owned_elements(size_t numel, int size, int rank) {
  return elements_of(chunk(bits::words_for(numel), size, rank), numel);
}

void onebit_allreduce(Communicator& comm, OnebitOps& ops, size_t numel) {
  const int n = comm.size(), r = comm.rank();
  Collective c = comm.begin("compressed_allreduce", "onebit_direct",
                            Fingerprint{0, kOnebitAllreduceOp, uint32_t(bits::DType::kFloat32), numel, 0, &describe_call});
  if (numel == 0) return;
  const size_t W = bits::words_for(numel);
  Workspace& ws = c.workspace();

  // 1. Feedback and compression of the whole tensor, one scale; chunk j's signs staged at its message.
  const float worker_scale = bits::onebit_scale(ops.add_worker_error(), numel);
  uint64_t* shards = scratch(ws, kShards, W + size_t(n));
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j);
    uint64_t* message = shards + message_offset(words, j);
    ops.compress_worker(worker_scale, elements_of(words, numel), message);
    put_scale(message + words.size, worker_scale);
  }

  // 2. All-to-all: my chunk's signs and scale from every rank.
  const Range mine = chunk(W, n, r), my_elements = elements_of(mine, numel);
  const size_t message_words = mine.size + 1;
  uint64_t* inbox = scratch(ws, kInbox, size_t(n) * message_words);
  patterns::send_to_owners(c, 0, inbox, message_words * 8, [&](int to) {
    const Range words = chunk(W, n, to);
    return std::pair<const void*, size_t>(shards + message_offset(words, to), (words.size + 1) * 8);
  });
  std::memcpy(inbox + size_t(r) * message_words, shards + message_offset(mine, r), message_words * 8);

  // 3. The owner: average, server feedback, compression with the chunk's own scale.
  std::vector<const uint64_t*> signs(static_cast<size_t>(n));
  std::vector<float> scales(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    signs[size_t(i)] = inbox + size_t(i) * message_words;
    scales[size_t(i)] = get_scale(inbox + size_t(i) * message_words + mine.size);
  }
  const float server_scale =
      bits::onebit_scale(ops.average_owner(signs.data(), scales.data(), n, my_elements.size), my_elements.size);
  uint64_t* results = scratch(ws, kResults, W + size_t(n));
  uint64_t* my_result = results + message_offset(mine, r);
  ops.compress_owner(server_scale, my_elements.size, my_result);
  put_scale(my_result + mine.size, server_scale);

  // 4. All-gather of the owners' signs and scales, then every chunk decompressed in place.
  patterns::exchange_with_peers(
      c, 1,
      [&](int from) {
        const Range words = chunk(W, n, from);
        return std::pair<void*, size_t>(results + message_offset(words, from), (words.size + 1) * 8);
      },
      [&](int) { return std::pair<const void*, size_t>(my_result, message_words * 8); });
  for (int j = 0; j < n; ++j) {
    const Range words = chunk(W, n, j);
    const uint64_t* message = results + message_offset(words, j);
    ops.expand(message, get_scale(message + words.size), elements_of(words, numel));
  }
  ops.settle();
}

void onebit_compress_alone(float* x, float* worker_error, float* server_error, size_t numel) {
  // Kept from call to call, as a communicator's workspace is: a fresh one paid the page faults of the
  // owner's average (numel floats) every step, 14 ms of a 2^22-element call against 3 ms of arithmetic.
  thread_local Workspace ws;
  HostOnebitOps ops(ws, x, worker_error, server_error, numel);
  const size_t W = bits::words_for(numel);
  uint64_t* signs = scratch(ws, kShards, W);
  const Range all{0, numel};
  const float worker_scale = bits::onebit_scale(ops.add_worker_error(), numel);
  ops.compress_worker(worker_scale, all, signs);
  const float* scales = &worker_scale;
  const uint64_t* const mine[1] = {signs};
  const float server_scale = bits::onebit_scale(ops.average_owner(mine, scales, 1, numel), numel);
  ops.compress_owner(server_scale, numel, signs);
  ops.expand(signs, server_scale, all);
}

void onebit_allreduce(Communicator& comm, float* x, float* worker_error, float* server_error, size_t numel) {
  HostOnebitOps ops(comm.workspace(), x, worker_error, server_error, numel);
  onebit_allreduce(comm, ops, numel);
}

}  // namespace pride
