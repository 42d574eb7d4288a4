// One macro for UCX status codes: throws pride::Error naming the call and UCX's reason.
#pragma once

#include <ucs/type/status.h>

#include "backend/common/error.h"

#define PRIDE_UCX_CHECK(call, ...)                                                                  \
  do {                                                                                             \
    ucs_status_t _pride_st = (call);                                                               \
    if (_pride_st != UCS_OK) {                                                                     \
      throw ::pride::Error(fmt::format("{}: {} failed: {} [{}:{}]", fmt::format(__VA_ARGS__), #call, \
                                       ucs_status_string(_pride_st), __FILE__, __LINE__));         \
    }                                                                                              \
  } while (0)
