#include "backend/common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include "backend/common/settings.h"

namespace pride {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("pride", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[pride %H:%M:%S.%e %^%l%$] %v");
    l->set_level(spdlog::level::from_str(Settings::get().log_level));
    return l;
  }();
  return *logger;
}

}  // namespace pride
