#include "torch_plugin/coalesced_work.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

namespace pride::torch_plugin {

// No profiling title for the base: it would open a profiler range that only Work::finish() closes, and
// this Work never finishes itself (its parts do, each with its own range).
CoalescedWork::CoalescedWork(int rank, c10d::OpType type, std::vector<c10::intrusive_ptr<c10d::Work>> parts)
    : c10d::Work(rank, type), parts_(std::move(parts)) {}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  // Made when first asked for, as the parts' own: asking a part for its Future hands its completion
  // to a callback thread (pride_work.h), which a call nobody takes the Future of need not pay.
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) future_ = make_future();
  return future_;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::make_future() {
  // For every device of the parts' futures: c10::collectAll's future has no devices, so neither had a
  // then() on it, and its value was there before the parts' CUDA work was (a get_future().wait() read
  // outputs that NCCL was still writing).
  std::vector<c10::Device> devices;
  auto futures = std::make_shared<std::vector<c10::intrusive_ptr<c10::ivalue::Future>>>();
  std::vector<at::Tensor> outputs;
  for (const auto& part : parts_) {
    futures->push_back(part->getFuture());
    for (const c10::Device& d : futures->back()->devices()) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
    for (const at::Tensor& t : part->result()) outputs.push_back(t);
  }
  auto made = torch_compat::make_tensor_list_future(devices);
  auto remaining = std::make_shared<std::atomic<size_t>>(futures->size());
  for (const auto& part_future : *futures) {
    // The callback holds the parts' futures until the last one ends; each future drops its callbacks
    // once it has run them, so nothing outlives the call. (A part that has ended runs it at once, here:
    // nobody else holds `made` yet, so no user callback runs under the lock.)
    part_future->addCallback([remaining, futures, future = made, outputs](c10::ivalue::Future&) {
      if (remaining->fetch_sub(1) != 1) return;
      for (const auto& f : *futures) {
        if (f->hasError()) {
          future->setErrorIfNeeded(f->exception_ptr());
          return;
        }
      }
      // The current streams (the callback's, which waited for this part's events) wait for every part's;
      // markCompleted then records the future's events after them.
      for (const auto& f : *futures) f->wait();
      future->markCompleted(c10::IValue(outputs));
    });
  }
  return made;
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
