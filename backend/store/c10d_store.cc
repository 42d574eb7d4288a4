#include "backend/store/c10d_store.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <string>

#include "backend/common/error.h"

namespace pride {
namespace {

class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override { store_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return store_->get(key); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  // torch's TCPStore (and PrefixStore over it) send all keys in one request; other stores loop.
  std::vector<std::vector<uint8_t>> multi_get(const std::vector<std::string>& keys) override {
    store_->wait(keys);
    return store_->multiGet(keys);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    PRIDE_CHECK_ARG(!required, "environment variable {} is not set (launch with torchrun or set RANK, "
                    "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", name);
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  PRIDE_CHECK_ARG(end != v && *end == '\0', "environment variable {}='{}' is not an integer", name, v);
  return static_cast<int>(x);
}

}  // namespace

std::shared_ptr<Store> wrap_c10d_store(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<C10dStore>(std::move(store));
}

LaunchEnv read_launch_env() {
  LaunchEnv e;
  e.rank = env_int("RANK", 0, true);
  e.world_size = env_int("WORLD_SIZE", 1, true);
  e.local_rank = env_int("LOCAL_RANK", e.rank, false);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, false);
  e.master_port = env_int("MASTER_PORT", 29500, true);
  if (const char* a = std::getenv("MASTER_ADDR")) e.master_addr = a;
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.use_agent_store = agent != nullptr && std::string(agent) == "True";
  if (const char* r = std::getenv("TORCHELASTIC_RESTART_COUNT")) e.restart_count = r;
  PRIDE_CHECK_ARG(e.world_size >= 1 && e.rank >= 0 && e.rank < e.world_size,
                  "RANK={} is not in [0, WORLD_SIZE={})", e.rank, e.world_size);
  return e;
}

std::shared_ptr<Store> connect_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = !env.use_agent_store && env.rank == 0;
  opts.numWorkers = env.use_agent_store ? std::nullopt : std::optional<size_t>(env.world_size);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  opts.multiTenant = true;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  // Same key space as torch's env:// rendezvous under torchrun, so Python and C++ ranks can meet.
  c10::intrusive_ptr<c10d::Store> store = tcp;
  if (env.use_agent_store) {
    store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + env.restart_count, tcp);
  }
  return wrap_c10d_store(store);
}

}  // namespace pride
