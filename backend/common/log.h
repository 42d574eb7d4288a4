// pride's logger (spdlog), level from PRIDE_DEBUG. Not for translation units that include torch
// headers (they see torch's fmt 12; spdlog is built against Debian's fmt 9).
#pragma once

#include <spdlog/spdlog.h>

namespace pride {
spdlog::logger& log();
}  // namespace pride
