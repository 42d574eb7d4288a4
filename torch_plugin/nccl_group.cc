#include "torch_plugin/nccl_group.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <utility>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "torch_plugin/cuda_event_pool.h"

namespace pride::torch_plugin {
namespace {

std::string gpu_uuid(c10::Device device) {
  cudaDeviceProp prop{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index()));
  std::string hex;
  static const char* digits = "0123456789abcdef";
  for (char byte : prop.uuid.bytes) {
    hex += digits[(uint8_t(byte) >> 4) & 0xF];
    hex += digits[uint8_t(byte) & 0xF];
  }
  return hex;
}

// An event recorded after the NCCL group on its stream, back to the pool with the call.
class EndEvent {
 public:
  EndEvent(c10::DeviceIndex device, cudaStream_t stream) : event_(device) {
    C10_CUDA_CHECK(cudaEventRecord(event_.get(), stream));
  }
  // true when reached; a CUDA error other than "not ready" is returned in *error.
  bool reached(std::string* error) const {
    const cudaError_t status = cudaEventQuery(event_.get());
    if (status == cudaSuccess) return true;
    (void)cudaGetLastError();  // "not ready" is no error: clear it
    if (status != cudaErrorNotReady) *error = cudaGetErrorString(status);
    return false;
  }

 private:
  PooledCudaEvent event_;
};

}  // namespace

NcclGroup::NcclGroup(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

NcclGroup::~NcclGroup() { abort(); }

GpuTransport NcclGroup::transport(c10::Device device, const Communicator& comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (transport_) return *transport_;
  const std::string& setting = Settings::get().cuda_transport;
  bool own_gpus = false;
  if (setting == "auto" && size_ > 1) {
    // (machine, GPU) of every rank: NCCL cannot put two ranks of one communicator on one GPU.
    const std::string mine = gpu_uuid(device);
    store_->set("nccl/gpu/" + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back("nccl/gpu/" + std::to_string(r));
    const std::vector<std::vector<uint8_t>> values = store_->multi_get(keys);
    std::vector<std::pair<std::string, std::string>> gpus;
    for (int r = 0; r < size_; ++r) {
      gpus.emplace_back(std::to_string(comm.node_of_rank()[size_t(r)]),
                        std::string(values[size_t(r)].begin(), values[size_t(r)].end()));
    }
    own_gpus = one_gpu_per_rank(gpus);
  } else if (size_ == 1) {
    own_gpus = true;
  }
  try {
    transport_ = choose_gpu_transport(setting, /*built_with_nccl=*/true, own_gpus, rank_);
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  return *transport_;
}

bool NcclGroup::chosen() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return transport_ == GpuTransport::kNccl;
}

NcclComm& NcclGroup::comm(Collective& c, c10::Device device) {
  auto it = comms_.find(device.index());
  if (it != comms_.end()) {
    PRIDE_ENFORCE_T(PeerError, !it->second->aborted(), "pride {}: the NCCL communicator on {} was aborted",
                    c.describe(), device.str());
    return *it->second;
  }
  // One device per rank: communicators on several devices would have to be created, used and closed
  // in one order on every rank, which nothing here agrees on.
  if (!comms_.empty()) {
    c.fail(fmt::format("over NCCL a rank uses one CUDA device; this one uses cuda:{} already, not cuda:{}",
                       comms_.begin()->first, int(device.index())));
  }
  // Every rank creates its communicators in the same queue order, so the n-th has the same key everywhere.
  const std::string key = "nccl/comm/" + std::to_string(created_++);
  std::unique_ptr<NcclComm> nccl;
  try {
    nccl = std::make_unique<NcclComm>(*store_, key, rank_, size_, device.index());
  } catch (const std::exception& e) {
    c.fail(e.what());  // the other ranks hear the cause now, not a timeout later
  }
  NcclComm& created = *nccl;
  comms_.emplace(device.index(), std::move(nccl));
  c.wait_external(
      "creating the NCCL communicator", [&created] { return created.ready(); },
      [&created] { return created.async_error(); }, [&created] { created.abort(); });
  return created;
}

void NcclGroup::close(std::chrono::milliseconds patience) {
  for (auto& [device, nccl] : comms_) nccl->close(patience);
}

void NcclGroup::abort() {
  for (auto& [device, nccl] : comms_) nccl->abort();
}

void NcclCall::run(const char* what, const std::function<void(NcclComm&, cudaStream_t)>& calls) {
  NcclComm& nccl = group_.comm(c_, device_);
  auto give_up = [&nccl] { nccl.abort(); };
  auto failure = [&nccl] { return nccl.async_error(); };
  bool group_open = false;
  try {
    const ncclResult_t started = ncclGroupStart();
    group_open = started == ncclSuccess;  // set before the check, which may throw
    nccl.check(started, "ncclGroupStart");
    calls(nccl, stream_);
    group_open = false;
    nccl.check(ncclGroupEnd(), what);
  } catch (const std::exception& e) {
    // NCCL refused a call outright (bad arguments, or the communicator failed): the peers may already
    // wait in their kernels, so the communicator goes and they are told. A group left open would
    // swallow this thread's next NCCL calls: it is closed first.
    if (group_open) (void)ncclGroupEnd();
    nccl.abort();
    c_.fail(e.what());
  }
  // Non-blocking: the group may still be being taken in; then the device runs it.
  c_.wait_external(what, [&nccl] { return nccl.ready(); }, failure, give_up);
  std::unique_ptr<EndEvent> end_event;
  try {
    end_event = std::make_unique<EndEvent>(device_.index(), stream_);
  } catch (const std::exception& e) {
    nccl.abort();
    c_.fail(e.what());
  }
  const EndEvent& end = *end_event;
  std::string cuda_error;
  c_.wait_external(
      what, [&] { return end.reached(&cuda_error); },
      [&]() -> std::string {
        if (!cuda_error.empty()) return "CUDA: " + cuda_error;
        return failure();
      },
      give_up);
}

}  // namespace pride::torch_plugin
