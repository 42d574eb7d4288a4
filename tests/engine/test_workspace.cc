// The communicator's scratch workspace: aligned buffers per key that grow and are reused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "backend/workspace.h"

namespace pride {
namespace {

TEST(Workspace, BuffersAreCacheLineAlignedAndKeptPerKey) {
  Workspace ws;
  auto* a = ws.get<uint64_t>({1, 0}, 1000);
  auto* b = ws.get<uint64_t>({1, 1}, 1000);
  auto* c = ws.get<char>({2, 0}, 3);
  for (const void* p : {static_cast<const void*>(a), static_cast<const void*>(b), static_cast<const void*>(c)}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  }
  EXPECT_NE(a, b);  // different keys never share memory
  std::memset(a, 0x11, 1000 * 8);
  std::memset(b, 0x22, 1000 * 8);
  EXPECT_EQ(a[999], 0x1111111111111111ull);  // writing b left a alone
  // A request that fits reuses the buffer (contents kept); a larger one grows it.
  EXPECT_EQ(ws.get<uint64_t>({1, 0}, 10), a);
  EXPECT_EQ(a[0], 0x1111111111111111ull);
  auto* grown = ws.get<uint64_t>({1, 0}, 100000);
  grown[99999] = 7;
  EXPECT_EQ(ws.get<uint64_t>({1, 0}, 5), grown);
  EXPECT_GE(ws.held_bytes(), 100000u * 8 + 1000u * 8 + 3);
}

}  // namespace
}  // namespace pride
