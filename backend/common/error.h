// Exception types of pride. Every error that reaches a user names the rank, and where one is
// involved the peer and the collective; the Python bindings map each type to a Python exception.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace pride {

// Base of everything pride throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input detected before anything was sent: the group stays usable (Python: ValueError/TypeError).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A collective did not complete before its deadline (Python: TimeoutError / DistBackendError).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer failed, closed its connection, or aborted the collective (Python: DistBackendError).
class PeerError : public Error {
 public:
  using Error::Error;
};

// Ranks called different collectives, or the same with different arguments.
class MismatchError : public Error {
 public:
  using Error::Error;
};

}  // namespace pride

// Throws pride::Error (or the given subclass) with file:line when `cond` is false.
#define PRIDE_ENFORCE_T(type, cond, ...)                                                            \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      throw type(fmt::format("{} [{}:{}]", fmt::format(__VA_ARGS__), __FILE__, __LINE__));         \
    }                                                                                              \
  } while (0)
#define PRIDE_ENFORCE(cond, ...) PRIDE_ENFORCE_T(::pride::Error, cond, __VA_ARGS__)
#define PRIDE_CHECK_ARG(cond, ...) PRIDE_ENFORCE_T(::pride::InvalidArgument, cond, __VA_ARGS__)
