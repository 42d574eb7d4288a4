#include "torch_plugin/pride_work.h"

namespace pride::torch_plugin {

PrideWork::PrideWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)),
      future_(torch_compat::make_tensor_list_future()) {}

void PrideWork::complete(std::exception_ptr error) {
  // The Future first: Work::wait() returning must imply the Future's value is visible.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

}  // namespace pride::torch_plugin
