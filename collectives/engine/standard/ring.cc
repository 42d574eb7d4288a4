#include "collectives/engine/standard/ring.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/reduce_ops.h"

namespace pride::standard {
namespace {
constexpr uint32_t kRingScratchOwner = 0x100;  // workspace key: the reduce-scatter's two segments
}  // namespace

size_t Blocks::largest() const { return count.empty() ? 0 : *std::max_element(count.begin(), count.end()); }

Blocks even_blocks(size_t total, int n) {
  const auto ranks = static_cast<size_t>(n);
  std::vector<size_t> counts(ranks, total / ranks);
  for (size_t b = 0; b < total % ranks; ++b) ++counts[b];
  return blocks_of(counts);
}

Blocks blocks_of(const std::vector<size_t>& counts) {
  Blocks blocks{std::vector<size_t>(counts.size()), counts};
  size_t offset = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    blocks.offset[b] = offset;
    offset += counts[b];
  }
  return blocks;
}

void ring_reduce_scatter(Collective& c, const void* in, void* out, const Blocks& blocks, ScalarType type,
                         ReduceOp op, uint32_t phase) {
  const int n = c.size();
  const int r = c.rank();
  const size_t element = scalar_size(type);
  const auto* input = static_cast<const char*>(in);
  auto* output = static_cast<char*>(out);
  if (n == 1) {
    if (output != input) std::memmove(output, input, blocks.count[0] * element);
    return;
  }
  const int right = ring_mod(r + 1, n);
  const int left = ring_mod(r - 1, n);
  const size_t segment = std::max<size_t>(1, kSegmentBytes / element);  // elements per message
  const size_t largest = blocks.largest();
  const size_t rounds = (largest + segment - 1) / segment;
  // Three scratch segments in rotation: step t receives into one while the partial of step t-1 is
  // on its way out of another, and the send of step t-1 has until step t+2 to finish before its
  // buffer is received into again. A send's completion (on TCP, the peer's acknowledgement) is
  // thus never waited for on the critical path, and the link stays busy between steps.
  constexpr int kBuffers = 3;
  const size_t scratch_elements = std::min(segment, largest);
  char* scratch = c.workspace().get<char>({kRingScratchOwner, 0}, kBuffers * scratch_elements * element);
  std::array<RequestPtr, kBuffers> sending;  // the send reading each buffer, if any
  std::vector<RequestPtr> input_sends;       // sends straight from the input (step 0 of each round)

  uint64_t step_index = 0;  // steps so far, over all rounds: picks the buffer
  for (size_t j = 0; j < rounds; ++j) {
    // Segment j of block b: [begin, begin + length) within the block, empty past its end.
    auto part = [&](int b, size_t& begin) {
      begin = std::min(j * segment, blocks.count[size_t(b)]);
      return std::min(segment, blocks.count[size_t(b)] - begin);
    };
    const char* outgoing = nullptr;
    int outgoing_buffer = -1;  // the scratch buffer `outgoing` lives in; -1 for the raw input
    // Step s: send the partial of block r-s-1 (at s = 0 the raw input), receive the partial of block
    // r-s-2 and add this rank's input to it. At the last step, s = n-2, that block is r itself.
    for (int s = 0; s + 1 < n; ++s, ++step_index) {
      const int send_block = ring_mod(r - s - 1, n);
      const int recv_block = ring_mod(r - s - 2, n);
      size_t send_begin = 0, recv_begin = 0;
      const size_t send_count = part(send_block, send_begin);
      const size_t recv_count = part(recv_block, recv_begin);
      if (s == 0) outgoing = input + (blocks.offset[size_t(send_block)] + send_begin) * element;
      const int buffer = static_cast<int>(step_index % kBuffers);
      char* incoming = scratch + size_t(buffer) * scratch_elements * element;
      c.wait(sending[size_t(buffer)]);  // the send that last read this buffer (from step t-3 or so)
      const uint32_t message_slot = slot(phase, j * uint64_t(n - 1) + uint64_t(s));
      RequestPtr receive = c.recv(left, message_slot, incoming, recv_count * element);
      RequestPtr send = c.send(right, message_slot, outgoing, send_count * element);
      c.wait(receive);
      // Both kinds finish in the background: the input is the caller's until we return (its block r,
      // which the last step writes in place, is never sent), a scratch buffer until it is reused.
      if (outgoing_buffer >= 0) {
        sending[size_t(outgoing_buffer)] = std::move(send);
      } else {
        input_sends.push_back(std::move(send));
      }
      const char* local = input + (blocks.offset[size_t(recv_block)] + recv_begin) * element;
      char* result = s + 2 == n ? output + recv_begin * element : incoming;
      reduce_elements(op, type, result, incoming, local, recv_count);
      outgoing = incoming;
      outgoing_buffer = buffer;
    }
  }
  for (auto& pending : sending) c.wait(pending);
  c.wait_all(input_sends);
}

void ring_allgather(Collective& c, void* buf, const Blocks& blocks, size_t unit, uint32_t phase) {
  const int n = c.size();
  const int r = c.rank();
  if (n == 1) return;
  auto* base = static_cast<char*>(buf);
  const int right = ring_mod(r + 1, n);
  const int left = ring_mod(r - 1, n);

  // Every receive is posted up front, each with its own slot, so (n-1) * segments per block must not
  // exceed kSlotsPerPhase: blocks beyond kSlotsPerPhase / (n-1) segments get longer segments instead.
  const size_t largest = blocks.largest() * unit;
  const size_t max_segments_per_block = kSlotsPerPhase / size_t(n - 1);
  const size_t segment_bytes =
      std::max(kSegmentBytes, (largest + max_segments_per_block - 1) / max_segments_per_block);
  const size_t stride = std::max<size_t>(1, (largest + segment_bytes - 1) / segment_bytes);
  auto segments = [&](int b) { return (blocks.count[size_t(b)] * unit + segment_bytes - 1) / segment_bytes; };
  auto segment = [&](int b, size_t k, size_t& bytes) {
    const size_t begin = k * segment_bytes;
    bytes = std::min(segment_bytes, blocks.count[size_t(b)] * unit - begin);
    return base + blocks.offset[size_t(b)] * unit + begin;
  };
  auto step_slot = [&](int s, size_t k) { return slot(phase, uint64_t(s) * stride + k); };

  // Step s forwards block r-s: this rank's own at s = 0, then the block that arrived at step s-1.
  // The receives land in distinct places of buf, so all of them can be posted at once.
  std::vector<RequestPtr> receives;
  for (int s = 0; s + 1 < n; ++s) {
    const int block = ring_mod(r - s - 1, n);
    for (size_t k = 0; k < segments(block); ++k) {
      size_t bytes = 0;
      char* where = segment(block, k, bytes);
      receives.push_back(c.recv(left, step_slot(s, k), where, bytes));
    }
  }
  std::vector<RequestPtr> sends;
  for (size_t k = 0; k < segments(r); ++k) {
    size_t bytes = 0;
    const char* what = segment(r, k, bytes);
    sends.push_back(c.send(right, step_slot(0, k), what, bytes));
  }
  // Forward each segment as soon as it arrives (except at the last step: the right neighbour
  // owns that block).
  size_t next = 0;
  for (int s = 0; s + 1 < n; ++s) {
    const int block = ring_mod(r - s - 1, n);
    for (size_t k = 0; k < segments(block); ++k) {
      c.wait(receives[next++]);
      if (s + 2 < n) {
        size_t bytes = 0;
        const char* what = segment(block, k, bytes);
        sends.push_back(c.send(right, step_slot(s + 1, k), what, bytes));
      }
    }
  }
  c.wait_all(sends);
}

}  // namespace pride::standard
