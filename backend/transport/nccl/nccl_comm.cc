#include "backend/transport/nccl/nccl_comm.h"

#include <cstring>
#include <thread>

#include "backend/common/error.h"
#include "backend/common/log.h"

namespace pride {
namespace {

// The device of the calling thread is NCCL's device for the calls made from it: set it for the call,
// and put the caller's back afterwards.
class DeviceScope {
 public:
  DeviceScope(int device, int rank, int size) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      const cudaError_t status = cudaSetDevice(device);
      PRIDE_ENFORCE(status == cudaSuccess, "pride rank {}/{}: cudaSetDevice({}) for NCCL failed: {}", rank, size, device,
                    cudaGetErrorString(status));
    }
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

}  // namespace

std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z since 2.9.
  return fmt::format("{}.{}.{}", version / 10000, (version / 100) % 100, version % 100);
}

NcclComm::NcclComm(Store& store, const std::string& key, int rank, int size, int device)
    : rank_(rank), size_(size), device_(device) {
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    PRIDE_ENFORCE(made == ncclSuccess, "pride rank {}/{}: ncclGetUniqueId failed: {}", rank, size,
                  ncclGetErrorString(made));
    store.set(key, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&id),
                                        reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
  } else {
    const std::vector<uint8_t> value = store.get(key);  // the store's own timeout bounds this wait
    PRIDE_ENFORCE(value.size() == sizeof(id), "pride rank {}/{}: the NCCL unique id under '{}' has {} bytes, not {}",
                  rank, size, key, value.size(), sizeof(id));
    std::memcpy(&id, value.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  DeviceScope on_device(device, rank, size);
  const ncclResult_t started = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    const std::string why = describe(started);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw Error(fmt::format("pride rank {}/{}: could not create the NCCL communicator on cuda:{} (NCCL {}): {}", rank,
                            size, device, nccl_version(), why));
  }
  log().debug("rank {}/{}: NCCL {} communicator on cuda:{} starting", rank, size, nccl_version(), device);
}

NcclComm::~NcclComm() { abort(); }

std::string NcclComm::describe(ncclResult_t result) const {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm_);
  if (last != nullptr && *last != '\0') text += fmt::format(" ({})", last);
  return text;
}

void NcclComm::check(ncclResult_t result, const char* what) const {
  PRIDE_ENFORCE(comm_ != nullptr, "pride rank {}/{}: {} on an NCCL communicator that was aborted", rank_, size_, what);
  if (result == ncclSuccess || result == ncclInProgress) return;
  throw PeerError(fmt::format("pride rank {}/{}: {} failed: {}", rank_, size_, what, describe(result)));
}

bool NcclComm::ready() const {
  if (comm_ == nullptr) return false;
  ncclResult_t state = ncclSuccess;
  return ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclSuccess;
}

std::string NcclComm::async_error() const {
  if (comm_ == nullptr) return "the NCCL communicator was aborted";
  ncclResult_t state = ncclSuccess;
  const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
  if (queried != ncclSuccess) return describe(queried);
  if (state == ncclSuccess || state == ncclInProgress) return {};
  return describe(state);
}

void NcclComm::abort() {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);  // never blocks on the peers; frees what the communicator holds
  comm_ = nullptr;
}

void NcclComm::close(std::chrono::milliseconds patience) {
  if (comm_ == nullptr) return;
  DeviceScope on_device(device_, rank_, size_);
  const ncclResult_t finalizing = ncclCommFinalize(comm_);
  bool finalized = false;
  if (finalizing == ncclSuccess || finalizing == ncclInProgress) {
    const auto until = std::chrono::steady_clock::now() + patience;
    while (!ready() && async_error().empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    finalized = ready();
  }
  if (finalized) {  // destroy after a finalize that failed could finalize again, and block
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    return;
  }
  log().warn("rank {}/{}: NCCL communicator on cuda:{} did not finalize ({}); aborting it", rank_, size_, device_,
            async_error().empty() ? "timed out" : async_error());
  abort();
}

}  // namespace pride
