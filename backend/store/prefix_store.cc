#include "backend/store/store.h"

namespace pride {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override { base_->set(prefix_ + key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return base_->get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { base_->wait(prefixed(keys)); }
  std::vector<std::vector<uint8_t>> multi_get(const std::vector<std::string>& keys) override {
    return base_->multi_get(prefixed(keys));
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool check(const std::vector<std::string>& keys) override { return base_->check(prefixed(keys)); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return full;
  }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> store) {
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(store));
}

}  // namespace pride
