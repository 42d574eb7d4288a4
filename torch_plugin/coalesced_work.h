// One Work for the several operations a coalesced call queues (allgather_coalesced,
// allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced: one collective per tensor, in
// order on the worker). It is complete when every part is, and fails with the first part's error.
// Returning the last part's Work, as these calls did, hid a failed earlier part: the caller's wait()
// succeeded while that part's output was never written.
#pragma once

#include <chrono>
#include <exception>
#include <mutex>
#include <vector>

#include "torch_plugin/torch_compat.h"

namespace pride::torch_plugin {

class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, c10d::OpType type, std::vector<c10::intrusive_ptr<c10d::Work>> parts);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  // Waits for the parts in order under one deadline; the first part that failed throws its error.
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  // Completes once every part's future has, with every part's outputs, or the first error; a future of
  // the parts' devices, whose events come after every part's.
  // Made when first asked for (as a PrideWork's), then the same one.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  c10::intrusive_ptr<c10::ivalue::Future> make_future();

  std::vector<c10::intrusive_ptr<c10d::Work>> parts_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace pride::torch_plugin
