#include "backend/common/settings.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "backend/common/error.h"

namespace pride {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

double env_double(const char* name, double fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  PRIDE_CHECK_ARG(end != v && *end == '\0', "{}='{}' is not a number", name, v);
  return d;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Settings read_settings() {
  Settings s;
  if (const char* v = env("PRIDE_ALGO")) s.algo = v;
  PRIDE_CHECK_ARG(s.algo == "auto" || s.algo == "ring" || s.algo == "tree" || s.algo == "direct" ||
                      s.algo == "allgather" || s.algo == "hier",
                  "PRIDE_ALGO='{}' is not one of auto, ring, tree, direct, allgather, hier", s.algo);
  // spdlog takes a name it does not know for "off": a typo would silence warnings too.
  if (const char* v = env("PRIDE_DEBUG")) s.log_level = lower(v);
  if (s.log_level == "warning") s.log_level = "warn";
  if (s.log_level == "error" || s.log_level == "critical") s.log_level = "err";  // pride logs nothing critical
  PRIDE_CHECK_ARG(s.log_level == "trace" || s.log_level == "debug" || s.log_level == "info" || s.log_level == "warn" ||
                      s.log_level == "err" || s.log_level == "off",
                  "PRIDE_DEBUG='{}' is not one of trace, debug, info, warn, error, off", env("PRIDE_DEBUG"));
  const double timeout_s = env_double("PRIDE_TIMEOUT", 300);
  PRIDE_CHECK_ARG(timeout_s >= 0.001 && timeout_s <= 1e9, "PRIDE_TIMEOUT={} is not a number of seconds in [0.001, 1e9]",
                  timeout_s);
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const double segment = env_double("PRIDE_SEGMENT_BYTES", double(s.segment_bytes));
  PRIDE_CHECK_ARG(segment == 0 || (segment >= 64 && segment <= double(size_t(1) << 40) && segment == double(int64_t(segment))),
                  "PRIDE_SEGMENT_BYTES={} is not a whole number of bytes of at least 64 (or 0: the default of each "
                  "algorithm)", segment);
  s.segment_bytes = static_cast<size_t>(segment);
  s.check_fingerprint = env_double("PRIDE_CHECK_FINGERPRINT", 1) != 0;
  s.link_latency_us = env_double("PRIDE_LINK_LATENCY_US", 0);
  PRIDE_CHECK_ARG(s.link_latency_us >= 0, "PRIDE_LINK_LATENCY_US={} is negative (0: the built-in model)",
                  s.link_latency_us);
  s.link_bandwidth_gbps = env_double("PRIDE_LINK_BANDWIDTH_GBPS", 0);
  PRIDE_CHECK_ARG(s.link_bandwidth_gbps >= 0, "PRIDE_LINK_BANDWIDTH_GBPS={} is negative (0: the built-in model)",
                  s.link_bandwidth_gbps);
  if (const char* v = env("PRIDE_HOSTNAME")) s.hostname = v;
  s.shared_memory = env_double("PRIDE_SHARED_MEMORY", 1) != 0;
  const double threads = env_double("PRIDE_THREADS", 0);
  PRIDE_CHECK_ARG(threads >= 0 && threads <= 1024 && threads == double(int(threads)),
                  "PRIDE_THREADS={} is not a whole number of threads in [0, 1024] (0: from the host's cores)", threads);
  s.threads = int(threads);
  if (const char* v = env("PRIDE_CUDA_PATH")) s.cuda_path = v;
  PRIDE_CHECK_ARG(s.cuda_path == "auto" || s.cuda_path == "device" || s.cuda_path == "host",
                  "PRIDE_CUDA_PATH='{}' is not one of auto, device, host", s.cuda_path);
  if (const char* v = env("PRIDE_RESULT_CODING")) s.result_coding = v;
  PRIDE_CHECK_ARG(s.result_coding == "auto" || s.result_coding == "planes" || s.result_coding == "trits" ||
                      s.result_coding == "counts" || s.result_coding == "packed",
                  "PRIDE_RESULT_CODING='{}' is not one of auto, planes, trits, counts, packed", s.result_coding);
  if (const char* v = env("PRIDE_CUDA_TRANSPORT")) s.cuda_transport = v;
  PRIDE_CHECK_ARG(s.cuda_transport == "auto" || s.cuda_transport == "nccl" || s.cuda_transport == "ucx",
                  "PRIDE_CUDA_TRANSPORT='{}' is not one of auto, nccl, ucx", s.cuda_transport);
  return s;
}

std::mutex g_mutex;
Settings* g_settings = nullptr;

}  // namespace

const Settings& Settings::get() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_settings == nullptr) g_settings = new Settings(read_settings());
  return *g_settings;
}

void Settings::reload() {
  Settings fresh = read_settings();  // may throw: the settings in use stay as they were
  std::lock_guard<std::mutex> lock(g_mutex);
  delete g_settings;
  g_settings = new Settings(std::move(fresh));
}

}  // namespace pride
