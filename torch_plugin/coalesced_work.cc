#include "torch_plugin/coalesced_work.h"

#include <utility>

namespace pride::torch_plugin {

// No profiling title for the base: it would open a profiler range that only Work::finish() closes, and
// this Work never finishes itself (its parts do, each with its own range).
CoalescedWork::CoalescedWork(int rank, c10d::OpType type, std::vector<c10::intrusive_ptr<c10d::Work>> parts)
    : c10d::Work(rank, type), parts_(std::move(parts)) {
  c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(
      c10::FutureType::create(c10::ListType::create(c10::TensorType::get())));
  std::vector<at::Tensor> outputs;
  for (const auto& part : parts_) {
    futures.push_back(part->getFuture());
    for (const at::Tensor& t : part->result()) outputs.push_back(t);
  }
  // collectAll fails with the first source's error; value() rethrows it into the future made here.
  future_ = c10::collectAll(futures)->then(
      [outputs = std::move(outputs)](c10::ivalue::Future& all) -> c10::IValue {
        all.value();
        return c10::IValue(outputs);
      },
      c10::ListType::create(c10::TensorType::get()));
}

bool CoalescedWork::isCompleted() {
  for (const auto& part : parts_) {
    if (!part->isCompleted()) return false;
  }
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& part : parts_) {
    if (!part->isSuccess()) return false;
  }
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& part : parts_) {
    if (auto error = part->exception()) return error;
  }
  return nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> outputs;
  for (const auto& part : parts_) {
    for (const at::Tensor& t : part->result()) outputs.push_back(t);
  }
  return outputs;
}

void CoalescedWork::synchronize() {
  for (const auto& part : parts_) part->synchronize();
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& part : parts_) {
    std::chrono::milliseconds left = ::kNoTimeout;
    if (timeout != ::kNoTimeout) {
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 1) left = std::chrono::milliseconds(1);  // 0 would mean "no timeout" to some Works
    }
    if (!part->wait(left)) return false;
  }
  return true;
}

}  // namespace pride::torch_plugin
