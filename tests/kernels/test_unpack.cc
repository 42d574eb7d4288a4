// unpack_vote and unpack_mean against per-element oracles; the output past n must stay untouched.
#include <cstring>

#include "oracle.h"

namespace pride::bits::test {
namespace {

using UnpackTest = IsaTest;

const DType kAllTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8};
const DType kFloatTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
constexpr uint8_t kCanary = 0xA5;

// Output buffer of n elements plus one element of canary bytes.
std::vector<uint8_t> output_buffer(DType dtype, size_t n) {
  return std::vector<uint8_t>((n + 1) * dtype_size(dtype), kCanary);
}

void expect_canary(const std::vector<uint8_t>& y, DType dtype, size_t n) {
  for (size_t b = n * dtype_size(dtype); b < y.size(); ++b) ASSERT_EQ(y[b], kCanary) << "wrote past n=" << n;
}

TEST_P(UnpackTest, Vote) {
  for (DType dtype : kAllTypes) {
    for (size_t n : lengths()) {
      for (bool with_tie : {false, true}) {
        const auto pos = random_plane(n);
        const auto tie = random_plane(n, 0.3);  // overlaps pos on purpose: pos wins
        auto y = output_buffer(dtype, n);
        unpack_vote(pos.data(), with_tie ? tie.data() : nullptr, n, y.data(), dtype);
        auto expected = output_buffer(dtype, n);
        for (size_t j = 0; j < n; ++j) {
          const float v = bit(pos.data(), j) ? 1.0f : (with_tie && bit(tie.data(), j)) ? 0.0f : -1.0f;
          store_float(dtype, v, expected.data(), j);
        }
        ASSERT_EQ(y, expected) << dtype_name(dtype) << " n=" << n << " tie=" << with_tie;
      }
    }
  }
}

// Outputs of 4 MiB and more are written with streaming stores where 32- or 16-byte aligned (torch's
// tensors are 64-byte aligned, malloc's large blocks 16): the same values, and nothing past n, as the
// cached path, which takes the outputs aligned otherwise.
TEST_P(UnpackTest, VoteLargeOutputAtEveryAlignment) {
  for (DType dtype : kAllTypes) {
    const size_t n = (size_t(4) << 20) / dtype_size(dtype) + 77;
    const auto pos = random_plane(n);
    const auto tie = random_plane(n, 0.3);
    auto expected = output_buffer(dtype, n);
    for (size_t j = 0; j < n; ++j) {
      store_float(dtype, bit(pos.data(), j) ? 1.0f : bit(tie.data(), j) ? 0.0f : -1.0f, expected.data(), j);
    }
    std::vector<uint8_t> storage(expected.size() + 64, kCanary);
    uint8_t* aligned = storage.data() + (32 - reinterpret_cast<uintptr_t>(storage.data()) % 32) % 32;
    for (size_t offset : {0, 16, 8, 2}) {  // streamed 32, streamed 16, cached, cached
      if (offset % dtype_size(dtype) != 0) continue;
      std::fill(storage.begin(), storage.end(), kCanary);
      uint8_t* y = aligned + offset;
      unpack_vote(pos.data(), tie.data(), n, y, dtype);
      ASSERT_EQ(0, std::memcmp(y, expected.data(), expected.size()))
          << dtype_name(dtype) << " n=" << n << " offset " << offset;
      for (uint8_t* b = storage.data(); b < y; ++b) ASSERT_EQ(*b, kCanary) << "wrote before y, offset " << offset;
    }
  }
}

// OutputStores::kStreaming streams small outputs too (the pipeline's pieces of a large tensor), at every
// alignment of y, for every length's tail: the values of the cached path, nothing written past n.
TEST_P(UnpackTest, VoteStreamedPiecesEqualTheCachedOutput) {
  for (DType dtype : kAllTypes) {
    for (size_t n : lengths()) {
      const auto pos = random_plane(n);
      const auto tie = random_plane(n, 0.3);
      auto expected = output_buffer(dtype, n);
      unpack_vote(pos.data(), tie.data(), n, expected.data(), dtype, OutputStores::kBySize);
      std::vector<uint8_t> storage(expected.size() + 64, kCanary);
      uint8_t* aligned = storage.data() + (32 - reinterpret_cast<uintptr_t>(storage.data()) % 32) % 32;
      for (size_t offset : {0, 16, 4}) {
        if (offset % dtype_size(dtype) != 0) continue;
        std::fill(storage.begin(), storage.end(), kCanary);
        uint8_t* y = aligned + offset;
        unpack_vote(pos.data(), tie.data(), n, y, dtype, OutputStores::kStreaming);
        ASSERT_EQ(0, std::memcmp(y, expected.data(), expected.size()))
            << dtype_name(dtype) << " n=" << n << " offset " << offset;
      }
    }
  }
  // A large output unpacked in 1 MiB pieces, as write_words does, equals the output unpacked whole.
  const size_t n = size_t(3) << 20;
  const auto pos = random_plane(n);
  std::vector<float> whole(n), pieces(n);
  unpack_vote(pos.data(), nullptr, n, whole.data(), DType::kFloat32);
  constexpr size_t kPiece = size_t(1) << 18;  // elements: 4096 words
  for (size_t first = 0; first < n; first += kPiece) {
    unpack_vote(pos.data() + first / 64, nullptr, std::min(kPiece, n - first), pieces.data() + first,
                DType::kFloat32, OutputStores::kStreaming);
  }
  ASSERT_EQ(0, std::memcmp(whole.data(), pieces.data(), n * sizeof(float)));
}

// Binary mean (scale 2, offset N) and ternary offset-encoded mean (scale 1, offset N).
TEST_P(UnpackTest, Mean) {
  for (DType dtype : kFloatTypes) {
    for (int nranks : {1, 2, 3, 4, 7, 8, 12, 33, 64}) {
      for (int scale : {2, 1}) {
        for (size_t n : short_lengths()) {
          const int max_u = scale == 2 ? nranks : 2 * nranks;
          const int planes = planes_for(max_u);
          std::vector<int32_t> u(n);
          for (auto& c : u) c = static_cast<int32_t>(rng()() % (max_u + 1));
          const auto counter = encode_counter(u, planes);
          auto y = output_buffer(dtype, n);
          unpack_mean(counter.data(), planes, n, scale, nranks, nranks, y.data(), dtype);
          auto expected = output_buffer(dtype, n);
          for (size_t j = 0; j < n; ++j) {
            const int32_t s = scale * u[j] - nranks;
            store_float(dtype, static_cast<float>(s) / static_cast<float>(nranks), expected.data(), j);
          }
          for (size_t j = 0; j < n; ++j) expect_same_value(dtype, expected.data(), y.data(), j, "unpack_mean");
          expect_canary(y, dtype, n);
        }
      }
    }
  }
}

// A long vector through the vector body, and a counter too wide for the int32 fast path.
TEST_P(UnpackTest, MeanLongAndWide) {
  for (DType dtype : kFloatTypes) {
    for (int planes : {4, 26}) {
      const size_t n = 100000 + 17;
      const int64_t nranks = planes == 4 ? 15 : (int64_t{1} << 25);
      std::vector<int32_t> u(n);
      for (auto& c : u) c = static_cast<int32_t>(rng()() % (nranks + 1));
      const auto counter = encode_counter(u, planes);
      auto y = output_buffer(dtype, n);
      unpack_mean(counter.data(), planes, n, 2, nranks, nranks, y.data(), dtype);
      auto expected = output_buffer(dtype, n);
      for (size_t j = 0; j < n; ++j) {
        const int64_t s = 2 * int64_t{u[j]} - nranks;
        store_float(dtype, static_cast<float>(s) / static_cast<float>(nranks), expected.data(), j);
      }
      for (size_t j = 0; j < n; ++j) expect_same_value(dtype, expected.data(), y.data(), j, "unpack_mean");
    }
  }
}

TEST_P(UnpackTest, MeanRejectsInt8) {
  uint64_t counter = 0;
  int8_t y = 0;
  EXPECT_THROW(unpack_mean(&counter, 1, 1, 2, 1, 1, &y, DType::kInt8), std::invalid_argument);
}

PRIDE_INSTANTIATE_ISA_TESTS(UnpackTest);

}  // namespace
}  // namespace pride::bits::test
