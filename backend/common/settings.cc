#include "backend/common/settings.h"

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

Settings read_settings() {
  Settings s;
  if (const char* v = env("PRIDE_ALGO")) s.algo = v;
  if (const char* v = env("PRIDE_DEBUG")) s.log_level = v;
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(env_double("PRIDE_TIMEOUT", 300) * 1000));
  s.segment_bytes = static_cast<size_t>(env_double("PRIDE_SEGMENT_BYTES", double(s.segment_bytes)));
  PRIDE_CHECK_ARG(s.segment_bytes == 0 || s.segment_bytes >= 64,
                  "PRIDE_SEGMENT_BYTES must be at least 64 (or 0: the default of each algorithm)");
  s.check_fingerprint = env_double("PRIDE_CHECK_FINGERPRINT", 1) != 0;
  s.link_latency_us = env_double("PRIDE_LINK_LATENCY_US", 0);
  s.link_bandwidth_gbps = env_double("PRIDE_LINK_BANDWIDTH_GBPS", 0);
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
