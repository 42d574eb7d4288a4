#include "backend/transport/transport.h"

#include <thread>

namespace pride {

void Transport::wait_for_activity(std::chrono::microseconds max_wait) { std::this_thread::sleep_for(max_wait); }

}  // namespace pride
