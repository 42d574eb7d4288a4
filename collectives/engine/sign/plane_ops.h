// Where the direct algorithm's packed planes live, and how the owner's work is done on them there.
//
// The direct algorithm (direct_segment.h) is written once against this interface: HostPlaneOps keeps
// its buffers in the communicator's workspace and runs the CPU kernels; a GPU implementation
// (torch_plugin/cuda_plane_ops.h) keeps them in device memory, runs the CUDA kernels on a stream and
// lets the transport move device memory itself (UCX cuda_ipc / cuda_copy). Both send the same
// messages, so ranks whose planes live in different memories still work together.
//
// Work a PlaneOps queues may run asynchronously; settle() waits for it. The algorithm calls settle()
// before it hands a buffer written by queued work to the transport, and before it reuses a buffer
// that queued work still reads; it ends with finish_results().
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/transport/transport.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/packed_counts.h"
#include "collectives/bits/trits.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_plan.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

class PlaneOps {
 public:
  virtual ~PlaneOps() = default;
  // What the transport is told about every buffer below.
  virtual MemoryType memory() const = 0;
  // A buffer of `words` words for `what` (instance 0 or 1: two segments in flight), in this memory.
  // Valid until the next call with the same key, or the end of the collective.
  virtual uint64_t* scratch(SignScratch what, size_t words, uint32_t instance) = 0;
  // As plane_copy.h.
  virtual void gather(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) = 0;
  virtual void scatter(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) = 0;
  // As bits::count_planes: counter = Σ ballots (nballots planes of nwords words), counter_planes planes.
  virtual void count(const uint64_t* const* ballots, int nballots, size_t nwords, uint64_t* counter,
                     int counter_planes) = 0;
  // As SignPlan::finalize.
  virtual void finalize(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                        size_t result_stride) = 0;
  // As bits::encode_trits / decode_trits (trit_coding.h): a vote result that can tie (pos and tie
  // planes, `stride` words apart, nwords words each) as trits five to a byte, and back.
  virtual void encode_trits(const uint64_t* planes, size_t stride, size_t nwords, uint8_t* out) = 0;
  virtual void decode_trits(const uint8_t* in, size_t nwords, uint64_t* planes, size_t stride) = 0;
  // As bits::encode_counts / decode_counts (count_coding.h): a mean result's code.planes planes
  // (`stride` words apart, nwords words each) as counts packed in base code.base, and back.
  virtual void encode_counts(const bits::counts::CountCode& code, const uint64_t* planes, size_t stride,
                             size_t nwords, uint32_t* out) = 0;
  virtual void decode_counts(const bits::counts::CountCode& code, const uint32_t* in, size_t nwords,
                             uint64_t* planes, size_t stride) = 0;
  // Returns when the work queued so far is done.
  virtual void settle() = 0;
  // The algorithm's last call: the result planes are written once the work queued so far is done.
  // By default it waits for that (settle); a GPU implementation whose caller orders its own readers
  // after the queue (an event on the stream) returns at once, and the host is not held.
  virtual void finish_results() { settle(); }
};

// Host memory: the communicator's workspace and the CPU kernels, done by the time each call returns.
class HostPlaneOps final : public PlaneOps {
 public:
  explicit HostPlaneOps(Workspace& workspace) : workspace_(workspace) {}
  MemoryType memory() const override { return MemoryType::kHost; }
  uint64_t* scratch(SignScratch what, size_t words, uint32_t instance) override {
    return sign_scratch(workspace_, what, words, instance);
  }
  void gather(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) override {
    gather_planes(base, stride, planes, words, out);
  }
  void scatter(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) override {
    scatter_planes(in, planes, words, base, stride);
  }
  void count(const uint64_t* const* ballots, int nballots, size_t nwords, uint64_t* counter,
             int counter_planes) override {
    bits::count_planes(ballots, nballots, nwords, counter, counter_planes);
  }
  void finalize(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                size_t result_stride) override {
    plan.finalize(counts, planes, nwords, result, result_stride);
  }
  void encode_trits(const uint64_t* planes, size_t stride, size_t nwords, uint8_t* out) override {
    bits::encode_trits(planes, planes + stride, nwords, out);
  }
  void decode_trits(const uint8_t* in, size_t nwords, uint64_t* planes, size_t stride) override {
    bits::decode_trits(in, nwords, planes, planes + stride);
  }
  void encode_counts(const bits::counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                     uint32_t* out) override {
    bits::encode_counts(code, planes, stride, nwords, out);
  }
  void decode_counts(const bits::counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                     size_t stride) override {
    bits::decode_counts(code, in, nwords, planes, stride);
  }
  void settle() override {}

 private:
  Workspace& workspace_;
};

}  // namespace pride
