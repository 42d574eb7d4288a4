// pack_binary / pack_ternary against x > 0 and x < 0 evaluated per element in float.
#include "oracle.h"

namespace pride::bits::test {
namespace {

using PackTest = IsaTest;

const DType kFloatTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST_P(PackTest, BinaryMatchesOracle) {
  for (DType dtype : kFloatTypes) {
    for (size_t n : lengths()) {
      const auto x = random_values(dtype, n);
      auto plane = dirty_words(words_for(n));
      pack_binary(x.data(), dtype, n, plane.data());
      for (size_t j = 0; j < n; ++j)
        ASSERT_EQ(bit(plane.data(), j), to_float(dtype, x.data(), j) > 0.0f)
            << dtype_name(dtype) << " n=" << n << " j=" << j << " x=" << to_float(dtype, x.data(), j);
      expect_trailing_zero(plane, n, "pack_binary");
    }
  }
}

TEST_P(PackTest, TernaryMatchesOracle) {
  for (DType dtype : kFloatTypes) {
    for (size_t n : lengths()) {
      const auto x = random_values(dtype, n);
      auto pos = dirty_words(words_for(n));
      auto neg = dirty_words(words_for(n));
      pack_ternary(x.data(), dtype, n, pos.data(), neg.data());
      for (size_t j = 0; j < n; ++j) {
        const float v = to_float(dtype, x.data(), j);
        ASSERT_EQ(bit(pos.data(), j), v > 0.0f) << dtype_name(dtype) << " n=" << n << " j=" << j << " x=" << v;
        ASSERT_EQ(bit(neg.data(), j), v < 0.0f) << dtype_name(dtype) << " n=" << n << " j=" << j << " x=" << v;
      }
      expect_trailing_zero(pos, n, "pack_ternary pos");
      expect_trailing_zero(neg, n, "pack_ternary neg");
    }
  }
}

// Every 16-bit pattern, so no bf16/fp16 edge case can hide between the special values.
TEST_P(PackTest, AllSixteenBitPatterns) {
  constexpr size_t n = 65536;
  std::vector<uint16_t> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<uint64_t> bin(words_for(n)), pos(words_for(n)), neg(words_for(n));
    pack_binary(x.data(), dtype, n, bin.data());
    pack_ternary(x.data(), dtype, n, pos.data(), neg.data());
    const auto* bytes = reinterpret_cast<const uint8_t*>(x.data());
    for (size_t j = 0; j < n; ++j) {
      const float v = to_float(dtype, bytes, j);
      ASSERT_EQ(bit(bin.data(), j), v > 0.0f) << dtype_name(dtype) << " bits=0x" << std::hex << j;
      ASSERT_EQ(bit(pos.data(), j), v > 0.0f) << dtype_name(dtype) << " bits=0x" << std::hex << j;
      ASSERT_EQ(bit(neg.data(), j), v < 0.0f) << dtype_name(dtype) << " bits=0x" << std::hex << j;
    }
  }
}

TEST_P(PackTest, ByteLayoutIsNumpyLittle) {
  // Elements 0 and 9 positive: byte 0 = 0b00000001, byte 1 = 0b00000010.
  std::vector<float> x(16, -1.0f);
  x[0] = 1.0f;
  x[9] = 2.0f;
  uint64_t plane = ~uint64_t{0};
  pack_binary(x.data(), DType::kFloat32, x.size(), &plane);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&plane);
  EXPECT_EQ(bytes[0], 0x01);
  EXPECT_EQ(bytes[1], 0x02);
  for (int b = 2; b < 8; ++b) EXPECT_EQ(bytes[b], 0) << "trailing byte " << b;
}

TEST_P(PackTest, RejectsInt8) {
  int8_t x[4] = {1, -1, 0, 1};
  uint64_t plane = 0, other = 0;
  EXPECT_THROW(pack_binary(x, DType::kInt8, 4, &plane), std::invalid_argument);
  EXPECT_THROW(pack_ternary(x, DType::kInt8, 4, &plane, &other), std::invalid_argument);
}

PRIDE_INSTANTIATE_ISA_TESTS(PackTest);

}  // namespace
}  // namespace pride::bits::test
