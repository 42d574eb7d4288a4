// Settings: every environment variable pride reads is checked when read, so a typo is an error naming
// the variable, never a silent default (a log level spdlog does not know would turn logging off).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/common/error.h"
#include "backend/common/settings.h"

namespace pride {
namespace {

// Sets `name` to `value`, reloads, and returns the error message ("" when the value was accepted).
// The variable is unset again and the settings reloaded either way.
std::string reload_with(const char* name, const char* value) {
  setenv(name, value, 1);
  std::string error;
  try {
    Settings::reload();
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  unsetenv(name);
  Settings::reload();
  return error;
}

TEST(Settings, LogLevelInAnyCaseAndItsAliases) {
  for (auto [given, held] : {std::pair{"INFO", "info"}, std::pair{"Debug", "debug"}, std::pair{"warning", "warn"},
                             std::pair{"ERROR", "err"}, std::pair{"critical", "err"}, std::pair{"off", "off"}}) {
    setenv("PRIDE_DEBUG", given, 1);
    Settings::reload();
    EXPECT_EQ(Settings::get().log_level, held) << given;
  }
  unsetenv("PRIDE_DEBUG");
  Settings::reload();
  EXPECT_EQ(Settings::get().log_level, "warn");
}

TEST(Settings, BadValuesAreErrorsNamingTheVariable) {
  struct Case {
    const char* name;
    const char* value;
  };
  for (auto [name, value] : {Case{"PRIDE_DEBUG", "1"}, Case{"PRIDE_DEBUG", "verbose"}, Case{"PRIDE_ALGO", "rings"},
                             Case{"PRIDE_TIMEOUT", "0"}, Case{"PRIDE_TIMEOUT", "0.0001"}, Case{"PRIDE_TIMEOUT", "-5"}, Case{"PRIDE_TIMEOUT", "1e30"},
                             Case{"PRIDE_TIMEOUT", "soon"}, Case{"PRIDE_SEGMENT_BYTES", "-1"},
                             Case{"PRIDE_SEGMENT_BYTES", "32"}, Case{"PRIDE_SEGMENT_BYTES", "1e30"},
                             Case{"PRIDE_SEGMENT_BYTES", "4096.5"}, Case{"PRIDE_LINK_LATENCY_US", "-1"},
                             Case{"PRIDE_LINK_BANDWIDTH_GBPS", "-0.5"}, Case{"PRIDE_THREADS", "2.5"},
                             Case{"PRIDE_RESULT_CODING", "bits"}, Case{"PRIDE_CUDA_PATH", "gpu"},
                             Case{"PRIDE_CUDA_TRANSPORT", "mpi"}}) {
    const std::string error = reload_with(name, value);
    EXPECT_NE(error.find(name), std::string::npos) << name << "=" << value << ": " << (error.empty() ? "accepted" : error);
  }
}

TEST(Settings, GoodValuesAreKept) {
  EXPECT_EQ(reload_with("PRIDE_ALGO", "hier"), "");
  EXPECT_EQ(reload_with("PRIDE_SEGMENT_BYTES", "0"), "");
  EXPECT_EQ(reload_with("PRIDE_SEGMENT_BYTES", "131072"), "");
  EXPECT_EQ(reload_with("PRIDE_TIMEOUT", "0.5"), "");
  setenv("PRIDE_TIMEOUT", "2.5", 1);
  setenv("PRIDE_SEGMENT_BYTES", "65536", 1);
  Settings::reload();
  EXPECT_EQ(Settings::get().timeout.count(), 2500);
  EXPECT_EQ(Settings::get().segment_bytes, 65536u);
  unsetenv("PRIDE_TIMEOUT");
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

}  // namespace
}  // namespace pride
