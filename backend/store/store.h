// The key-value store pride bootstraps through (UCX worker addresses, hostnames). An interface so
// the engine needs no torch; the real implementation is torch's c10d store (c10d_store.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pride {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists (or the store's timeout passes, then throws).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether every key exists, at once (get() on a missing key waits for it).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits for every key, then reads them all: a store that can (torch's TCPStore) answers in one
  // round trip each, however many keys; the fallback reads them one by one.
  virtual std::vector<std::vector<uint8_t>> multi_get(const std::vector<std::string>& keys) {
    wait(keys);
    std::vector<std::vector<uint8_t>> values;
    values.reserve(keys.size());
    for (const auto& k : keys) values.push_back(get(k));
    return values;
  }
};

// A view of `store` where every key is prefixed with `prefix` + "/" (one namespace per group).
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> store);

}  // namespace pride
