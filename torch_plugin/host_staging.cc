#include "torch_plugin/host_staging.h"

#include <c10/util/Exception.h>

#include <utility>

#include "torch_plugin/pride_backend.h"
#ifdef PRIDE_WITH_CUDA_TENSORS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "torch_plugin/cuda_ordering.h"
#endif

namespace pride::torch_plugin {
namespace {
thread_local StagingScope* g_active = nullptr;
}  // namespace

struct StagingScope::State {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (the caller's CUDA tensor, its host twin)
  std::vector<bool> written;                             // per pair: the collective writes it
#ifdef PRIDE_WITH_CUDA_TENSORS
  std::shared_ptr<CudaOrdering> ordering;
#endif
};

StagingScope::StagingScope(PrideBackend& backend, std::vector<at::Tensor*> tensors, const char* collective) {
  const at::Tensor* first_cuda = nullptr;
  for (at::Tensor* t : tensors) {
    if (t->defined() && t->is_cuda()) {
      first_cuda = t;
      break;
    }
  }
  if (first_cuda == nullptr) return;
  const c10::Device device = first_cuda->device();
  for (at::Tensor* t : tensors) {
    TORCH_CHECK_VALUE(!t->defined() || t->device() == device, "pride ", collective,
                      ": all tensors of a call must be on one device, got ", device, " and ", t->device());
  }
#ifdef PRIDE_WITH_CUDA_TENSORS
  state_ = std::make_shared<State>();
  state_->ordering = backend.cuda_ordering(device);
  // Every twin first, then the swap: an allocation that throws leaves the caller's tensors as they were.
  for (at::Tensor* slot : tensors) {
    if (!slot->defined()) continue;
    at::Tensor twin = at::empty(slot->sizes(), slot->options().device(at::kCPU).pinned_memory(true));
    state_->pairs.emplace_back(*slot, twin);
  }
  slots_ = std::move(tensors);
  size_t next = 0;
  for (at::Tensor* slot : slots_) {
    if (!slot->defined()) continue;
    state_->ordering->use_on_internal_stream(*slot);
    *slot = state_->pairs[next++].second;
  }
  previous_ = g_active;
  g_active = this;
#else
  (void)backend;
  TORCH_CHECK_VALUE(false, "pride ", collective, ": got a tensor on ", device,
                    ", but this build of pride has no CUDA support (build it where the CUDA toolkit is, "
                    "PRIDE_WITH_CUDA=ON)");
#endif
}

StagingScope::~StagingScope() {
  if (!state_) return;
  g_active = previous_;
  size_t i = 0;
  for (at::Tensor* slot : slots_) {
    if (slot->defined()) *slot = state_->pairs[i++].first;
  }
}

StagingScope* StagingScope::active() { return g_active; }

std::vector<at::Tensor> StagingScope::originals(const std::vector<at::Tensor>& tensors) const {
  std::vector<at::Tensor> out = tensors;
  for (auto& t : out) {
    for (const auto& [original, twin] : state_->pairs) {
      if (t.is_same(twin)) {
        t = original;
        break;
      }
    }
  }
  return out;
}

std::shared_ptr<DeviceCompletion> StagingScope::completion() const {
#ifdef PRIDE_WITH_CUDA_TENSORS
  return state_->ordering;
#else
  return nullptr;
#endif
}

BackendTask StagingScope::wrap(BackendTask task, const std::vector<at::Tensor>& outputs) const {
#ifdef PRIDE_WITH_CUDA_TENSORS
  state_->written.assign(state_->pairs.size(), false);
  for (size_t i = 0; i < state_->pairs.size(); ++i) {
    for (const at::Tensor& out : outputs) {
      if (out.defined() && out.is_same(state_->pairs[i].second)) state_->written[i] = true;
    }
  }
  return [state = state_, task = std::move(task)](Communicator& comm, PrideWork& work) {
    CudaOrdering& ordering = *state->ordering;
    ordering.enter();
    {
      c10::cuda::CUDAStreamGuard guard(ordering.internal());
      for (auto& [original, twin] : state->pairs) twin.copy_(original, /*non_blocking=*/true);
      C10_CUDA_CHECK(cudaStreamSynchronize(ordering.stream()));
    }
    const bool done = task(comm, work);
    {
      c10::cuda::CUDAStreamGuard guard(ordering.internal());
      for (size_t i = 0; i < state->pairs.size(); ++i) {
        if (state->written[i]) state->pairs[i].first.copy_(state->pairs[i].second, /*non_blocking=*/true);
      }
    }
    ordering.finish();
    ordering.wait_finished_on_host();  // the twins are freed with this task; the copies must be done
    return done;
  };
#else
  (void)outputs;
  return task;
#endif
}

}  // namespace pride::torch_plugin
