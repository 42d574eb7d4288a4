// The standard collectives on CUDA tensors, staged through host memory (until an NCCL transport
// carries them on the device). On the caller's thread the CUDA tensors of a call are swapped for
// pinned host twins, the collective's CPU code runs on the twins unchanged, and enqueue() wraps its
// task: pride's stream waits for the caller's stream, the twins are filled from the device, the CPU
// collective runs, the results go back to the device on pride's stream, and the Work's wait() orders
// the caller's stream after them (cuda_ordering.h). The caller's tensor lists are restored when the
// scope ends, and the Work reports the caller's tensors, not the twins.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "torch_plugin/device_completion.h"
#include "torch_plugin/pride_work.h"

namespace pride::torch_plugin {

class PrideBackend;
using BackendTask = std::function<bool(Communicator&, PrideWork&)>;

class StagingScope {
 public:
  // Does nothing unless one of `tensors` is a CUDA tensor; then all defined ones must be CUDA tensors
  // of one device (ValueError otherwise, and in a build of pride without CUDA).
  StagingScope(PrideBackend& backend, std::vector<at::Tensor*> tensors, const char* collective);
  ~StagingScope();
  StagingScope(const StagingScope&) = delete;
  StagingScope& operator=(const StagingScope&) = delete;

  // The innermost scope of this thread that staged something, or null.
  static StagingScope* active();

  // `outputs`: the tensors the collective writes (the twins, as enqueue() receives them); only these go
  // back to the device, so an input that aliases an output cannot overwrite the result.
  BackendTask wrap(BackendTask task, const std::vector<at::Tensor>& outputs) const;
  std::vector<at::Tensor> originals(const std::vector<at::Tensor>& tensors) const;
  std::shared_ptr<DeviceCompletion> completion() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<at::Tensor*> slots_;
  StagingScope* previous_ = nullptr;
};

// Pointers to every tensor of a call's arguments, for StagingScope.
inline void collect_tensors(std::vector<at::Tensor*>&) {}
template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, at::Tensor& t, Rest&... rest);
template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, std::vector<at::Tensor>& ts, Rest&... rest);
template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, std::vector<std::vector<at::Tensor>>& tss, Rest&... rest);

template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, at::Tensor& t, Rest&... rest) {
  out.push_back(&t);
  collect_tensors(out, rest...);
}
template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, std::vector<at::Tensor>& ts, Rest&... rest) {
  for (auto& t : ts) out.push_back(&t);
  collect_tensors(out, rest...);
}
template <class... Rest>
void collect_tensors(std::vector<at::Tensor*>& out, std::vector<std::vector<at::Tensor>>& tss, Rest&... rest) {
  for (auto& ts : tss) {
    for (auto& t : ts) out.push_back(&t);
  }
  collect_tensors(out, rest...);
}
template <class... Args>
std::vector<at::Tensor*> tensor_refs(Args&... args) {
  std::vector<at::Tensor*> out;
  collect_tensors(out, args...);
  return out;
}

}  // namespace pride::torch_plugin
