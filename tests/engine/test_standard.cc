// The standard collectives against oracles computed in the test. Rank r's input is a function of
// (r, index), so every rank computes every other rank's input and the expected result locally. The
// inputs are small integers (products: ±1, ±2), which every dtype represents exactly and whose sums
// and products stay exact, so the oracle may reduce in any order and still match bit for bit; a
// separate test feeds arbitrary floats and checks that all ranks get the same bits.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/standard/collectives.h"
#include "collectives/engine/standard/common.h"
#define PRIDE_KERNEL_NS test_standard
#include "collectives/bits/element_traits.h"
#undef PRIDE_KERNEL_NS
#include "tests/engine/rank_threads.h"

namespace pride {
namespace {

using testing::run_ranks;
using testing::run_ranks_collect_errors;

const std::vector<int> kGroupSizes = {1, 2, 3, 4, 5, 7, 8};
const std::vector<size_t> kCounts = {0, 1, 2, 63, 64, 65, 1000};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg,  ReduceOp::kProduct, ReduceOp::kMin,
                                ReduceOp::kMax, ReduceOp::kBand, ReduceOp::kBor,     ReduceOp::kBxor};

// ---- Element types: the test's own storage types (torch's), one per ScalarType -------------------

template <typename T>
constexpr bool kIsComplex = std::is_same_v<T, c10::complex<float>> || std::is_same_v<T, c10::complex<double>> ||
                            std::is_same_v<T, c10::complex<c10::Half>>;
// A complex type's part (c10::complex<c10::Half> has no value_type).
template <typename T>
using ComplexPart = std::remove_cvref_t<decltype(std::declval<T>().real())>;
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;

template <typename F>
void for_each_type(F&& f) {
  f.template operator()<bool>(ScalarType::kBool);
  f.template operator()<uint8_t>(ScalarType::kUInt8);
  f.template operator()<int8_t>(ScalarType::kInt8);
  f.template operator()<int16_t>(ScalarType::kInt16);
  f.template operator()<int32_t>(ScalarType::kInt32);
  f.template operator()<int64_t>(ScalarType::kInt64);
  f.template operator()<uint16_t>(ScalarType::kUInt16);
  f.template operator()<uint32_t>(ScalarType::kUInt32);
  f.template operator()<uint64_t>(ScalarType::kUInt64);
  f.template operator()<c10::Half>(ScalarType::kFloat16);
  f.template operator()<c10::BFloat16>(ScalarType::kBFloat16);
  f.template operator()<float>(ScalarType::kFloat32);
  f.template operator()<double>(ScalarType::kFloat64);
  f.template operator()<c10::complex<float>>(ScalarType::kComplex64);
  f.template operator()<c10::complex<double>>(ScalarType::kComplex128);
  f.template operator()<c10::complex<c10::Half>>(ScalarType::kComplex32);
}

// Which ops torch defines per dtype, restated from the spec (not from check_reduce_op).
bool op_defined(ReduceOp op, ScalarType type) {
  const bool floating = type == ScalarType::kFloat16 || type == ScalarType::kBFloat16 ||
                        type == ScalarType::kFloat32 || type == ScalarType::kFloat64;
  const bool complex =
      type == ScalarType::kComplex64 || type == ScalarType::kComplex128 || type == ScalarType::kComplex32;
  switch (op) {
    case ReduceOp::kSum: return true;
    case ReduceOp::kProduct: return type != ScalarType::kComplex32;  // torch.distributed: SUM and AVG on complex
    case ReduceOp::kAvg: return floating || complex;
    case ReduceOp::kMin:
    case ReduceOp::kMax: return !complex;
    default: return !floating && !complex;
  }
}

// Small integers: general values in [-15, 15], product values in {±1, ±2}, imaginary parts in [-1, 1].
int64_t general_value(int rank, size_t i) { return int64_t((size_t(rank) * 7 + i * 13 + 3) % 31) - 15; }
int64_t product_value(int rank, size_t i) {
  constexpr int64_t kValues[] = {1, -1, 2, -2};
  return kValues[(size_t(rank) * 3 + i) % 4];
}
int64_t imag_value(int rank, size_t i) { return int64_t((size_t(rank) + 2 * i) % 3) - 1; }

template <typename T>
T make(int64_t re, int64_t im) {
  if constexpr (std::is_same_v<T, bool>) {
    return (re & 1) != 0;
  } else if constexpr (kIsComplex<T>) {
    using V = ComplexPart<T>;
    return T(static_cast<V>(re), static_cast<V>(im));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(re);  // modular for the unsigned types
  } else {
    return T(static_cast<float>(re));
  }
}

template <typename T>
T input(ReduceOp op, int rank, size_t i) {
  return make<T>(op == ReduceOp::kProduct ? product_value(rank, i) : general_value(rank, i), imag_value(rank, i));
}

// The reference op, written from torch's semantics.
template <typename T>
T apply_op(ReduceOp op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kMax: case ReduceOp::kBor: return a || b;
      case ReduceOp::kBxor: return a != b;
      default: return a && b;
    }
  } else if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::kSum: return static_cast<T>(uint64_t(a) + uint64_t(b));  // wraps, like torch
      case ReduceOp::kProduct: return static_cast<T>(uint64_t(a) * uint64_t(b));
      case ReduceOp::kMin: return std::min(a, b);
      case ReduceOp::kMax: return std::max(a, b);
      case ReduceOp::kBand: return static_cast<T>(a & b);
      case ReduceOp::kBor: return static_cast<T>(a | b);
      default: return static_cast<T>(a ^ b);
    }
  } else if constexpr (kIsComplex<T>) {
    return op == ReduceOp::kProduct ? a * b : a + b;
  } else {
    switch (op) {
      case ReduceOp::kProduct: return static_cast<T>(a * b);
      case ReduceOp::kMin: return b < a ? b : a;
      case ReduceOp::kMax: return a < b ? b : a;
      default: return static_cast<T>(a + b);
    }
  }
}

template <typename T>
T divide_by(T sum, int n) {
  if constexpr (kIsComplex<T>) {
    using V = ComplexPart<T>;
    return T(sum.real() / V(n), sum.imag() / V(n));
  } else if constexpr (kIsHalf<T>) {
    return T(static_cast<float>(sum) / static_cast<float>(n));
  } else {
    return sum / T(n);
  }
}

template <typename T>
T expected_reduction(ReduceOp op, int n, size_t i) {
  T acc = input<T>(op, 0, i);
  for (int rank = 1; rank < n; ++rank) acc = apply_op(op, acc, input<T>(op, rank, i));
  return op == ReduceOp::kAvg ? divide_by(acc, n) : acc;
}

std::string hex(const void* p, size_t bytes) {
  std::string s;
  for (size_t b = bytes; b-- > 0;) s += fmt::format("{:02x}", static_cast<const uint8_t*>(p)[b]);
  return s;
}

// Compares `count` elements of `got` with `expected(i)`, bit for bit (by value when `by_value`);
// reports the first difference.
template <typename T, typename F>
void expect_elements(const T* got, size_t count, F expected, const std::string& what, bool by_value = false) {
  for (size_t i = 0; i < count; ++i) {
    const T want = expected(i);
    const bool same = by_value ? got[i] == want : std::memcmp(&got[i], &want, sizeof(T)) == 0;
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " of " << count << " is 0x" << hex(&got[i], sizeof(T))
                    << ", expected 0x" << hex(&want, sizeof(T));
      return;
    }
  }
}

// A complex product's zero imaginary part is +0 or -0 depending on the order of the factors, which
// the oracle does not share with the algorithms; everything else the inputs make exact to the bit.
template <typename T>
bool exact_only_by_value(ReduceOp op) {
  return kIsComplex<T> && op == ReduceOp::kProduct;
}

template <typename T>
void check_allreduce(Communicator& comm, ScalarType type, ReduceOp op, size_t count) {
  std::unique_ptr<T[]> buf(new T[count]);
  for (size_t i = 0; i < count; ++i) buf[i] = input<T>(op, comm.rank(), i);
  allreduce(comm, buf.get(), count, type, op);
  expect_elements(buf.get(), count, [&](size_t i) { return expected_reduction<T>(op, comm.size(), i); },
                  fmt::format("rank {}/{} allreduce {} {} count {}", comm.rank(), comm.size(), scalar_name(type),
                              reduce_op_name(op), count),
                  exact_only_by_value<T>(op));
}

// A count whose buffer is just over the small-message limit, so allreduce takes the ring, with
// blocks of unequal length.
template <typename T>
size_t ring_count(int n) {
  return (size_t(64) << 10) / sizeof(T) + size_t(3 * n + 1);
}

uint8_t pattern(int rank, size_t i) { return static_cast<uint8_t>(i * 131 + size_t(rank) * 29 + (i >> 8)); }

// ---- float16 / bfloat16 conversions ----------------------------------------------------------------

// pride's one half-precision converter (element_traits.h: kernels, CUDA kernels, the reductions here)
// against torch's, NaN included.
namespace half {
using pride::bits::detail::test_standard::bf16_to_f32;
using pride::bits::detail::test_standard::f16_to_f32;
using pride::bits::detail::test_standard::f32_to_bf16;
using pride::bits::detail::test_standard::f32_to_f16;
}  // namespace half

TEST(HalfFloat, MatchesTorchOnEveryHalfAndManyFloats) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half::f16_to_f32(uint16_t(h));
    const float torch_f = static_cast<float>(c10::Half(uint16_t(h), c10::Half::from_bits()));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(torch_f)) << "fp16 0x" << std::hex << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(half::bf16_to_f32(uint16_t(h))),
              std::bit_cast<uint32_t>(static_cast<float>(c10::BFloat16(uint16_t(h), c10::BFloat16::from_bits()))));
  }
  // Every float whose low 13 bits are near a rounding boundary, plus random ones.
  std::mt19937 rng(7);
  std::vector<uint32_t> floats;
  for (uint32_t top = 0; top < (1u << 19); ++top) {
    for (uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu}) floats.push_back(top << 13 | low);
  }
  for (int k = 0; k < 1000000; ++k) floats.push_back(rng());
  for (uint32_t bits : floats) {
    const float f = std::bit_cast<float>(bits);
    ASSERT_EQ(half::f32_to_f16(f), c10::Half(f).x) << "float 0x" << std::hex << bits;
    ASSERT_EQ(half::f32_to_bf16(f), c10::BFloat16(f).x) << "float 0x" << std::hex << bits;
  }
}

// ---- allreduce -------------------------------------------------------------------------------------

TEST(Allreduce, SumEveryTypeGroupSizeAndCount) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      for_each_type([&]<typename T>(ScalarType type) {
        for (size_t count : kCounts) check_allreduce<T>(comm, type, ReduceOp::kSum, count);
        check_allreduce<T>(comm, type, ReduceOp::kSum, ring_count<T>(n));
      });
    });
  }
}

TEST(Allreduce, EveryOpWhereDefined) {
  // Both algorithms per op; the ring's block arithmetic does not depend on the op, and the SUM test
  // covers it at every group size, so the ring runs only on the small groups here (time).
  for (int n : {2, 3, 8}) {
    run_ranks(n, [n](Communicator& comm) {
      for_each_type([&]<typename T>(ScalarType type) {
        for (ReduceOp op : kAllOps) {
          if (!op_defined(op, type)) continue;
          for (size_t count : {size_t(1), size_t(65)}) check_allreduce<T>(comm, type, op, count);
          if (n <= 3) check_allreduce<T>(comm, type, op, ring_count<T>(n));
        }
      });
    });
  }
}

TEST(Allreduce, LargeBuffersTakeTheRingAndMoveTheMinimumBytes) {
  constexpr size_t kCount = (size_t(1) << 20) + 3;  // several pipeline segments, unequal blocks
  for (int n : {2, 3, 4}) {
    run_ranks(n, [n](Communicator& comm) {
      check_allreduce<float>(comm, ScalarType::kFloat32, ReduceOp::kSum, kCount);
      check_allreduce<int64_t>(comm, ScalarType::kInt64, ReduceOp::kSum, kCount);
      // Reduce-scatter sends every block but this rank's own, all-gather every block but the right
      // neighbour's: 2(N-1)/N of the buffer, give or take one element per block.
      const auto& t = comm.traffic().at("allreduce_ring");
      const size_t block = kCount / size_t(n);
      const uint64_t low = 2 * (kCount - block - 1) * (sizeof(float) + sizeof(int64_t));
      const uint64_t high = 2 * (kCount - block) * (sizeof(float) + sizeof(int64_t));
      EXPECT_EQ(t.calls, 2u);
      EXPECT_GE(t.bytes_sent, low);
      EXPECT_LE(t.bytes_sent, high);
    });
  }
}

TEST(Allreduce, FloatResultsAreBitwiseIdenticalOnEveryRank) {
  // Arbitrary floats: sums round differently in different orders, so this checks that every rank
  // applies the reductions in the same order (both algorithms).
  for (int n : {3, 5, 8}) {
    std::vector<std::vector<std::vector<uint8_t>>> results(static_cast<size_t>(n));
    run_ranks(n, [&](Communicator& comm) {
      auto& mine = results[size_t(comm.rank())];
      for_each_type([&]<typename T>(ScalarType type) {
        if constexpr (!std::is_integral_v<T>) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct}) {
            if (!op_defined(op, type)) continue;
            for (size_t count : {size_t(1000), ring_count<T>(n)}) {
              std::mt19937 rng(uint32_t(comm.rank() * 1000 + int(op)));
              std::uniform_real_distribution<float> dist(0.5f, 1.5f);
              std::vector<T> buf(count);
              for (auto& x : buf) {
                if constexpr (kIsComplex<T>) {
                  x = T(dist(rng), dist(rng));
                } else {
                  x = T(dist(rng));
                }
              }
              allreduce(comm, buf.data(), count, type, op);
              const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
              mine.emplace_back(bytes, bytes + count * sizeof(T));
            }
          }
        }
      });
    });
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(results[size_t(r)].size(), results[0].size());
      for (size_t k = 0; k < results[0].size(); ++k) {
        EXPECT_TRUE(results[size_t(r)][k] == results[0][k]) << "N=" << n << " rank " << r << " call " << k;
      }
    }
  }
}

// Up to CheckPayload::kMaxBytes the fingerprint check reduces the buffer itself (no rounds of its
// own); with the check off allreduce_small does. Both must give the same bits, on every rank, for
// float sums whose result depends on the order, at group sizes with and without a fold.
TEST(Allreduce, SmallBuffersInTheCheckGiveTheSameBitsAsWithoutIt) {
  constexpr size_t kMaxFloats = CheckPayload::kMaxBytes / sizeof(float);
  for (int n : {2, 5, 8}) {
    std::vector<std::vector<std::vector<float>>> results(2, std::vector<std::vector<float>>(size_t(n)));
    for (int check : {1, 0}) {
      setenv("PRIDE_CHECK_FINGERPRINT", check ? "1" : "0", 1);
      Settings::reload();
      run_ranks(n, [&](Communicator& comm) {
        auto& mine = results[size_t(check)][size_t(comm.rank())];
        for (size_t count : {size_t(1), size_t(7), kMaxFloats, kMaxFloats + 1}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            std::mt19937 rng(uint32_t(comm.rank() * 7919 + count));
            std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
            std::vector<float> buf(count);
            for (auto& x : buf) x = dist(rng) * 1e3f;
            allreduce(comm, buf.data(), count, ScalarType::kFloat32, op);
            mine.insert(mine.end(), buf.begin(), buf.end());
          }
        }
        // The payload is the traffic (the check's own bytes are not): 4 bytes x rounds, both ways.
        const auto& t = comm.traffic().at("allreduce_small");
        EXPECT_GT(t.bytes_sent, 0u);
      });
    }
    unsetenv("PRIDE_CHECK_FINGERPRINT");
    Settings::reload();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(results[1][size_t(r)].size(), results[0][0].size());
      EXPECT_EQ(std::memcmp(results[1][size_t(r)].data(), results[0][0].data(), results[0][0].size() * sizeof(float)), 0)
          << "N=" << n << " rank " << r << ": the check's reduction differs from allreduce_small's (or from rank 0's)";
    }
  }
}

TEST(Allreduce, UndefinedOpThrowsBeforeAnythingIsSent) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<int32_t> buf(10, 1);
    EXPECT_THROW(allreduce(comm, buf.data(), 10, ScalarType::kInt32, ReduceOp::kAvg), InvalidArgument);
    std::vector<float> f(4, 1.0f);
    EXPECT_THROW(allreduce(comm, f.data(), 4, ScalarType::kFloat32, ReduceOp::kBxor), InvalidArgument);
    std::vector<c10::complex<float>> z(4);
    EXPECT_THROW(allreduce(comm, z.data(), 4, ScalarType::kComplex64, ReduceOp::kMax), InvalidArgument);
    EXPECT_THROW(allreduce(comm, nullptr, 4, ScalarType::kFloat32, ReduceOp::kSum), InvalidArgument);
    EXPECT_TRUE(comm.traffic().empty());  // no collective began
    // The group is still usable, and a null buffer with no elements is fine.
    allreduce(comm, nullptr, 0, ScalarType::kFloat32, ReduceOp::kSum);
    allreduce(comm, buf.data(), 10, ScalarType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(buf[0], 3);
  });
}

TEST(ReduceOps, CheckReduceOpAcceptsExactlyTheDefinedCombinations) {
  for_each_type([&]<typename T>(ScalarType type) {
    for (ReduceOp op : kAllOps) {
      if (op_defined(op, type)) {
        EXPECT_NO_THROW(check_reduce_op(op, type)) << reduce_op_name(op) << " " << scalar_name(type);
      } else {
        EXPECT_THROW(check_reduce_op(op, type), InvalidArgument) << reduce_op_name(op) << " " << scalar_name(type);
      }
    }
    EXPECT_EQ(scalar_size(type), sizeof(T)) << scalar_name(type);
  });
}

TEST(Allreduce, MismatchedCountThrowsMismatchErrorOnEveryRank) {
  run_ranks(4, [](Communicator& comm) {
    std::vector<float> buf(100, 1.0f);
    const size_t count = comm.rank() == 2 ? 99 : 100;
    EXPECT_THROW(allreduce(comm, buf.data(), count, ScalarType::kFloat32, ReduceOp::kSum), MismatchError);
    const ReduceOp op = comm.rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum;
    EXPECT_THROW(allreduce(comm, buf.data(), 100, ScalarType::kFloat32, op), MismatchError);
    allreduce(comm, buf.data(), 100, ScalarType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(buf[99], 4.0f);
  });
}

// The message names the calls as a user wrote them, not as op and dtype codes.
TEST(Allreduce, MismatchMessageNamesOperationsAndDtypes) {
  auto errors = run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<float> buf(100, 1.0f);
    const ReduceOp op = comm.rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum;
    allreduce(comm, buf.data(), comm.rank() == 1 ? 99 : 100, ScalarType::kFloat32, op);
  });
  EXPECT_NE(errors[0].find("this rank called allreduce SUM float32 numel 100 (#1), rank 1 called allreduce MAX "
                           "float32 numel 99 (#1)"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("this rank called allreduce MAX float32 numel 99 (#1), rank 0 called allreduce SUM "
                           "float32 numel 100 (#1)"), std::string::npos) << errors[1];
  auto different = run_ranks_collect_errors(2, [](Communicator& comm) {
    uint8_t x[4] = {};
    if (comm.rank() == 0) {
      broadcast(comm, x, 4, 0);
    } else {
      barrier(comm);
    }
  });
  EXPECT_NE(different[0].find("rank 1 called barrier (#1)"), std::string::npos) << different[0];
  EXPECT_NE(different[1].find("this rank called barrier (#1), rank 0 called broadcast 4 bytes from root 0 (#1)"),
            std::string::npos) << different[1];
}

// ---- broadcast -------------------------------------------------------------------------------------

TEST(Broadcast, EveryRootGroupSizeAndSize) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      std::vector<size_t> sizes = kCounts;
      sizes.push_back(300001);  // scatter + all-gather for N > 2
      for (int root = 0; root < n; ++root) {
        if (root == 0 || root == n - 1) sizes.push_back((size_t(3) << 20) + 5);
        for (size_t bytes : sizes) {
          std::vector<uint8_t> buf(bytes, 0xEE);
          if (comm.rank() == root) {
            for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(root, i);
          }
          broadcast(comm, buf.data(), bytes, root);
          expect_elements(buf.data(), bytes, [&](size_t i) { return pattern(root, i); },
                          fmt::format("rank {}/{} broadcast root {} bytes {}", comm.rank(), n, root, bytes));
        }
        if (root == 0 || root == n - 1) sizes.pop_back();
      }
    });
  }
}

TEST(Broadcast, BadRootThrowsAndMismatchedRootIsCaught) {
  run_ranks(3, [](Communicator& comm) {
    uint8_t x = 0;
    EXPECT_THROW(broadcast(comm, &x, 1, 3), InvalidArgument);
    EXPECT_THROW(broadcast(comm, &x, 1, -1), InvalidArgument);
    EXPECT_THROW(broadcast(comm, &x, 1, comm.rank() == 0 ? 1 : 0), MismatchError);
    x = uint8_t(comm.rank() + 10);
    broadcast(comm, &x, 1, 2);
    EXPECT_EQ(x, 12);
  });
}

// ---- allgather, allgatherv ---------------------------------------------------------------------

TEST(Allgather, EveryGroupSizeAndSizeOutOfAndInPlace) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      std::vector<size_t> sizes = kCounts;
      if (n <= 4) sizes.push_back((size_t(1) << 20) + 7);  // several segments per block
      for (size_t bytes : sizes) {
        for (bool in_place : {false, true}) {
          std::vector<uint8_t> out(bytes * size_t(n), 0xEE);
          std::vector<uint8_t> in(bytes);
          uint8_t* src = in_place ? out.data() + bytes * size_t(comm.rank()) : in.data();
          for (size_t i = 0; i < bytes; ++i) src[i] = pattern(comm.rank(), i);
          allgather(comm, src, bytes, out.data());
          expect_elements(out.data(), out.size(), [&](size_t i) { return pattern(int(i / bytes), i % bytes); },
                          fmt::format("rank {}/{} allgather bytes {} in place {}", comm.rank(), n, bytes, in_place));
        }
      }
    });
  }
}

TEST(Allgatherv, UnequalAndEmptyBlocks) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      for (int variant = 0; variant < 3; ++variant) {
        std::vector<size_t> bytes(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          bytes[size_t(r)] = variant == 0   ? size_t(r * 37 % 100)          // rank 0 sends nothing
                             : variant == 1 ? (r == n - 1 ? 1000 : 0)      // one rank sends everything
                                            : size_t(r) * (n <= 4 ? 400000 : 1000) + 3;
        }
        std::vector<size_t> offset(size_t(n) + 1, 0);
        for (int r = 0; r < n; ++r) offset[size_t(r) + 1] = offset[size_t(r)] + bytes[size_t(r)];
        std::vector<uint8_t> in(bytes[size_t(comm.rank())]);
        for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(comm.rank(), i);
        std::vector<uint8_t> out(offset[size_t(n)], 0xEE);
        allgatherv(comm, in.data(), bytes, out.data());
        for (int r = 0; r < n; ++r) {
          expect_elements(out.data() + offset[size_t(r)], bytes[size_t(r)], [&](size_t i) { return pattern(r, i); },
                          fmt::format("rank {}/{} allgatherv variant {} block {}", comm.rank(), n, variant, r));
        }
      }
    });
  }
}

TEST(Allgatherv, SizesThatDifferBetweenRanksAreAMismatch) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<uint8_t> in(10), out(40);
    EXPECT_THROW(allgatherv(comm, in.data(), {10, 10}, out.data()), InvalidArgument);
    std::vector<size_t> bytes = {10, 10, 10};
    if (comm.rank() == 1) bytes[0] = 9;
    EXPECT_THROW(allgatherv(comm, in.data(), bytes, out.data()), MismatchError);
  });
}

// ---- barrier -------------------------------------------------------------------------------------

TEST(Barrier, NoRankLeavesBeforeEveryRankArrived) {
  for (int n : kGroupSizes) {
    constexpr int kRounds = 20;
    std::vector<std::atomic<int>> arrived(kRounds);
    run_ranks(n, [&](Communicator& comm) {
      for (int round = 0; round < kRounds; ++round) {
        if ((round + comm.rank()) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        arrived[size_t(round)].fetch_add(1);
        barrier(comm);
        EXPECT_EQ(arrived[size_t(round)].load(), n) << "rank " << comm.rank() << " round " << round;
      }
    });
  }
}

// ---- reduce --------------------------------------------------------------------------------------

template <typename T>
void check_reduce(Communicator& comm, ScalarType type, ReduceOp op, size_t count, int root) {
  std::unique_ptr<T[]> buf(new T[count]);
  for (size_t i = 0; i < count; ++i) buf[i] = input<T>(op, comm.rank(), i);
  reduce(comm, buf.get(), count, type, op, root);
  if (comm.rank() != root) return;  // other ranks' buffers are scratch
  expect_elements(buf.get(), count, [&](size_t i) { return expected_reduction<T>(op, comm.size(), i); },
                  fmt::format("rank {}/{} reduce {} {} count {} root {}", comm.rank(), comm.size(), scalar_name(type),
                              reduce_op_name(op), count, root),
                  exact_only_by_value<T>(op));
}

// Just over the tree limit: the reduce-scatter + gather algorithm, with unequal blocks.
template <typename T>
size_t reduce_ring_count(int n) {
  return (size_t(256) << 10) / sizeof(T) + size_t(3 * n + 1);
}

TEST(Reduce, SumEveryTypeRootGroupSizeAndCount) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      for (int root = 0; root < n; ++root) {
        for_each_type([&]<typename T>(ScalarType type) {
          for (size_t count : {size_t(0), size_t(1), size_t(65), size_t(1000)}) {
            check_reduce<T>(comm, type, ReduceOp::kSum, count, root);
          }
          if (root == n - 1) check_reduce<T>(comm, type, ReduceOp::kSum, reduce_ring_count<T>(n), root);
        });
      }
    });
  }
}

TEST(Reduce, EveryOpWhereDefined) {
  for (int n : {3, 5}) {
    run_ranks(n, [n](Communicator& comm) {
      for_each_type([&]<typename T>(ScalarType type) {
        for (ReduceOp op : kAllOps) {
          if (!op_defined(op, type)) continue;
          check_reduce<T>(comm, type, op, 65, 1);
          if (n == 3) check_reduce<T>(comm, type, op, reduce_ring_count<T>(n), 1);
        }
      });
    });
  }
}

TEST(Reduce, BadArgumentsAndMismatchedRoots) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<int32_t> buf(8, 1);
    EXPECT_THROW(reduce(comm, buf.data(), 8, ScalarType::kInt32, ReduceOp::kSum, 3), InvalidArgument);
    EXPECT_THROW(reduce(comm, buf.data(), 8, ScalarType::kInt32, ReduceOp::kAvg, 0), InvalidArgument);
    EXPECT_THROW(reduce(comm, buf.data(), 8, ScalarType::kInt32, ReduceOp::kSum, comm.rank() == 2 ? 1 : 0),
                 MismatchError);
    reduce(comm, buf.data(), 8, ScalarType::kInt32, ReduceOp::kSum, 2);
    if (comm.rank() == 2) {
      EXPECT_EQ(buf[7], 3);
    }
  });
}

// ---- gather, scatter -----------------------------------------------------------------------------

TEST(GatherScatter, EveryRootGroupSizeAndSize) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      const int r = comm.rank();
      for (int root = 0; root < n; ++root) {
        for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(1000), size_t(100003)}) {
          const std::string what = fmt::format("rank {}/{} root {} bytes {}", r, n, root, bytes);
          // gather, out of place and (on the root) in place
          for (bool in_place : {false, true}) {
            std::vector<uint8_t> out(r == root ? bytes * size_t(n) : 0, 0xEE);
            std::vector<uint8_t> in(bytes);
            uint8_t* src = in_place && r == root ? out.data() + bytes * size_t(r) : in.data();
            for (size_t i = 0; i < bytes; ++i) src[i] = pattern(r, i);
            gather(comm, src, bytes, r == root ? out.data() : nullptr, root);
            expect_elements(out.data(), out.size(), [&](size_t i) { return pattern(int(i / bytes), i % bytes); },
                            "gather " + what);
          }
          // scatter: block b of the root's input is pattern(b + 100, .)
          std::vector<uint8_t> in(r == root ? bytes * size_t(n) : 0);
          for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(int(i / bytes) + 100, i % bytes);
          std::vector<uint8_t> out(bytes, 0xEE);
          scatter(comm, r == root ? in.data() : nullptr, out.data(), bytes, root);
          expect_elements(out.data(), bytes, [&](size_t i) { return pattern(r + 100, i); }, "scatter " + what);
        }
      }
    });
  }
}

TEST(GatherScatter, BadArgumentsAndMismatchedSizes) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<uint8_t> in(30), out(30);
    EXPECT_THROW(gather(comm, in.data(), 10, out.data(), -1), InvalidArgument);
    EXPECT_THROW(gather(comm, in.data(), 10, nullptr, comm.rank()), InvalidArgument);  // every rank is "root"
    EXPECT_THROW(scatter(comm, nullptr, out.data(), 10, comm.rank()), InvalidArgument);
    EXPECT_THROW(scatter(comm, in.data(), out.data(), comm.rank() == 0 ? 9 : 10, 1), MismatchError);
    scatter(comm, in.data(), out.data(), 10, 1);
  });
}

// ---- reduce_scatter ------------------------------------------------------------------------------

template <typename T>
void check_reduce_scatter(Communicator& comm, ScalarType type, ReduceOp op, const std::vector<size_t>& counts) {
  const auto r = static_cast<size_t>(comm.rank());
  size_t total = 0, offset = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (b == r) offset = total;
    total += counts[b];
  }
  std::unique_ptr<T[]> in(new T[total]);
  std::unique_ptr<T[]> out(new T[counts[r]]);
  for (size_t i = 0; i < total; ++i) in[i] = input<T>(op, comm.rank(), i);
  reduce_scatter(comm, in.get(), out.get(), counts, type, op);
  expect_elements(out.get(), counts[r], [&](size_t i) { return expected_reduction<T>(op, comm.size(), offset + i); },
                  fmt::format("rank {}/{} reduce_scatter {} {} total {}", r, comm.size(), scalar_name(type),
                              reduce_op_name(op), total),
                  exact_only_by_value<T>(op));
}

TEST(ReduceScatter, EqualUnequalAndEmptyBlocks) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      std::vector<std::vector<size_t>> layouts;
      for (size_t count : {0, 1, 65, 1000}) layouts.emplace_back(size_t(n), count);
      std::vector<size_t> ragged(static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) ragged[size_t(b)] = size_t(b * 37 % 100);  // block 0 empty
      layouts.push_back(ragged);
      for_each_type([&]<typename T>(ScalarType type) {
        for (const auto& counts : layouts) check_reduce_scatter<T>(comm, type, ReduceOp::kSum, counts);
      });
      if (n <= 4) {
        // Blocks of several segments, one of them empty.
        std::vector<size_t> large(static_cast<size_t>(n));
        for (int b = 0; b < n; ++b) large[size_t(b)] = b == 1 ? 0 : (size_t(1) << 19) * size_t(b + 1) + 5;
        check_reduce_scatter<float>(comm, ScalarType::kFloat32, ReduceOp::kSum, large);
        check_reduce_scatter<double>(comm, ScalarType::kFloat64, ReduceOp::kAvg, large);
      }
    });
  }
}

TEST(ReduceScatter, EveryOpWhereDefined) {
  run_ranks(3, [](Communicator& comm) {
    const std::vector<size_t> counts = {65, 1, 300};
    for_each_type([&]<typename T>(ScalarType type) {
      for (ReduceOp op : kAllOps) {
        if (op_defined(op, type)) check_reduce_scatter<T>(comm, type, op, counts);
      }
    });
  });
}

TEST(ReduceScatter, BadArgumentsAndMismatchedCounts) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> in(30), out(10);
    EXPECT_THROW(reduce_scatter(comm, in.data(), out.data(), {10, 10}, ScalarType::kFloat32, ReduceOp::kSum),
                 InvalidArgument);
    EXPECT_THROW(reduce_scatter(comm, in.data(), out.data(), {10, 10, 10}, ScalarType::kFloat32, ReduceOp::kBand),
                 InvalidArgument);
    std::vector<size_t> counts = {10, 10, 10};
    if (comm.rank() == 0) counts = {10, 9, 11};  // same total, different split
    EXPECT_THROW(reduce_scatter(comm, in.data(), out.data(), counts, ScalarType::kFloat32, ReduceOp::kSum),
                 MismatchError);
  });
}

// ---- alltoallv -----------------------------------------------------------------------------------

// Bytes rank `from` sends to rank `to`, in three layouts: ragged with empty blocks, all empty but one
// pair, and large.
size_t alltoall_bytes(int layout, int from, int to, int n) {
  switch (layout) {
    case 0: return size_t((from * 7 + to * 3) % 50);
    case 1: return from == n - 1 && to == 0 ? 1000 : 0;
    default: return size_t(from + 1) * 100000 + size_t(to);
  }
}

TEST(Alltoallv, EveryGroupSizeAndLayout) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      const int r = comm.rank();
      for (int layout = 0; layout < 3; ++layout) {
        std::vector<size_t> send_bytes(static_cast<size_t>(n)), recv_bytes(static_cast<size_t>(n));
        for (int p = 0; p < n; ++p) {
          send_bytes[size_t(p)] = alltoall_bytes(layout, r, p, n);
          recv_bytes[size_t(p)] = alltoall_bytes(layout, p, r, n);
        }
        std::vector<uint8_t> in, out;
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < send_bytes[size_t(p)]; ++i) in.push_back(pattern(r * 16 + p, i));
        }
        size_t total = 0;
        for (size_t b : recv_bytes) total += b;
        out.assign(total, 0xEE);
        alltoallv(comm, in.data(), send_bytes, out.data(), recv_bytes);
        size_t offset = 0;
        for (int p = 0; p < n; ++p) {
          expect_elements(out.data() + offset, recv_bytes[size_t(p)], [&](size_t i) { return pattern(p * 16 + r, i); },
                          fmt::format("rank {}/{} alltoallv layout {} from {}", r, n, layout, p));
          offset += recv_bytes[size_t(p)];
        }
      }
    });
  }
}

// The size digests of allgatherv and reduce_scatter stay below the detail's flag bits: a digest with
// bit 62 set read as "over NCCL" (and would let a UCX rank agree with an NCCL one).
TEST(Fingerprints, SizeDigestsLeaveTheFlagBitsClear) {
  std::mt19937_64 rng(7);
  int flagged_before = 0;
  for (int trial = 0; trial < 256; ++trial) {
    std::vector<size_t> sizes(size_t(trial % 7 + 1));
    for (size_t& s : sizes) s = size_t(rng() % 100000);
    flagged_before += (standard::hash_sizes(sizes) & kFingerprintOverNccl) != 0;
    const uint64_t detail = standard::sizes_detail(sizes);
    EXPECT_EQ(detail >> 56, 0u) << trial;
    const std::string call = describe_call(
        standard::fingerprint(standard::OpId::kAllgatherv, ScalarType::kUInt8, 24, detail));
    EXPECT_EQ(call.find("NCCL"), std::string::npos) << call;
  }
  EXPECT_GT(flagged_before, 0) << "the test's premise: unmasked digests do set the flag";
}

// In place (torch's all_to_all_single(t, t)): one buffer is both the input and the output. Blocks of
// different sizes per pair (symmetric, so each rank's total is the same both ways).
TEST(Alltoallv, InPlaceGivesEveryBlock) {
  for (int n : kGroupSizes) {
    run_ranks(n, [n](Communicator& comm) {
      const int r = comm.rank();
      auto bytes = [](int a, int b) { return size_t((a + b) % 5) * 3 + 1; };
      std::vector<size_t> send_bytes(static_cast<size_t>(n)), recv_bytes(static_cast<size_t>(n));
      std::vector<uint8_t> buffer;
      for (int p = 0; p < n; ++p) {
        send_bytes[size_t(p)] = bytes(r, p);
        recv_bytes[size_t(p)] = bytes(p, r);
        for (size_t i = 0; i < bytes(r, p); ++i) buffer.push_back(pattern(r * 16 + p, i));
      }
      alltoallv(comm, buffer.data(), send_bytes, buffer.data(), recv_bytes);
      size_t offset = 0;
      for (int p = 0; p < n; ++p) {
        expect_elements(buffer.data() + offset, recv_bytes[size_t(p)], [&](size_t i) { return pattern(p * 16 + r, i); },
                        fmt::format("rank {}/{} alltoallv in place from {}", r, n, p));
        offset += recv_bytes[size_t(p)];
      }
    });
  }
}

TEST(Alltoallv, SizesThatDisagreeBetweenPeersFailNamingThePeer) {
  auto errors = run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<size_t> send_bytes = {4, 4, 4}, recv_bytes = {4, 4, 4};
    if (comm.rank() == 1) recv_bytes[0] = 5;  // rank 0 sends rank 1 only 4
    std::vector<uint8_t> in(12), out(13);
    alltoallv(comm, in.data(), send_bytes, out.data(), recv_bytes);
  });
  EXPECT_NE(errors[1].find("peer 0 sent 4 bytes where this rank expected 5"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("alltoallv"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace pride
