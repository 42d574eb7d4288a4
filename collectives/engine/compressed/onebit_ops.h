// Where the compressed allreduce's tensor and errors live, and how its three compressions are computed
// there (onebit_allreduce.h has the algorithm).
//
// The algorithm is written once against this interface and exchanges host messages (sign words and a
// scale). HostOnebitOps computes on the CPU, in place on host tensors; a GPU implementation
// (torch_plugin/cuda_onebit_ops.h) keeps the tensor and both errors in device memory and moves only the
// packed signs between the GPU and the messages. Every rank ends with the same bits either way: each
// chunk's result is decided once, by its owner.
//
// Calls may queue work that runs asynchronously; each one that returns a value or fills a host buffer
// has finished what that needs by the time it returns. settle() waits for the rest.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/workspace.h"
#include "collectives/engine/patterns/chunks.h"

namespace pride {

class OnebitOps {
 public:
  virtual ~OnebitOps() = default;
  // Step 1, the whole tensor: y = x + worker_error (x becomes y). Returns Σ y² in double.
  virtual double add_worker_error() = 0;
  // Step 1, elements `elements` (a range of whole words but the tensor's last): y's signs into host words
  // `signs` (bit 1 = +1: y ≥ 0, −0 or NaN) and worker_error = y − scale·sign(y) there.
  virtual void compress_worker(float scale, patterns::Range elements, uint64_t* signs) = 0;
  // Step 3, the owner's `n` elements (the server error's length): z = (Σ_i scales[i]·sign_i) / count over
  // `count` host sign vectors, then z += server_error. Returns Σ z² in double.
  virtual double average_owner(const uint64_t* const* signs, const float* scales, int count, size_t n) = 0;
  // Step 3: z's signs into host words `signs`, server_error = z − scale·sign(z).
  virtual void compress_owner(float scale, size_t n, uint64_t* signs) = 0;
  // Step 4: x = ±scale over `elements` from host words `signs`.
  virtual void expand(const uint64_t* signs, float scale, patterns::Range elements) = 0;
  // Returns when everything queued is done.
  virtual void settle() = 0;
};

// Host tensors and the CPU kernels (bits/onebit.h); every call is done when it returns.
class HostOnebitOps final : public OnebitOps {
 public:
  HostOnebitOps(Workspace& workspace, float* x, float* worker_error, float* server_error, size_t numel)
      : workspace_(workspace), x_(x), worker_error_(worker_error), server_error_(server_error), numel_(numel) {}
  double add_worker_error() override;
  void compress_worker(float scale, patterns::Range elements, uint64_t* signs) override;
  double average_owner(const uint64_t* const* signs, const float* scales, int count, size_t n) override;
  void compress_owner(float scale, size_t n, uint64_t* signs) override;
  void expand(const uint64_t* signs, float scale, patterns::Range elements) override;
  void settle() override {}

 private:
  Workspace& workspace_;
  float* x_;
  float* worker_error_;
  float* server_error_;
  size_t numel_;
  float* average_ = nullptr;  // the owner's z, in the workspace
};

}  // namespace pride
