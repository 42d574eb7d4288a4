#include "oracle.h"

#include <cmath>
#include <cstring>
#if !defined(__aarch64__) && !defined(__FLT16_MAX__)
#include <immintrin.h>
#endif

namespace pride::bits::test {

void IsaTest::SetUp() {
  saved_ = active_isa();
  if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported on this CPU";
  set_isa(GetParam());
}

void IsaTest::TearDown() { set_isa(saved_); }

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

const std::vector<size_t>& lengths() {
  static const std::vector<size_t> list = [] {
    std::vector<size_t> v = {0, 1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4096, 100000};
    std::mt19937_64 gen(7);
    for (int i = 0; i < 4; ++i) v.push_back((gen() % 50000) | 1);  // random odd lengths
    return v;
  }();
  return list;
}

const std::vector<size_t>& short_lengths() {
  static const std::vector<size_t> list = {0, 1, 63, 64, 65, 200, 1031};
  return list;
}

std::mt19937_64& rng() {
  static std::mt19937_64 gen(12345);
  return gen;
}

namespace {

const std::vector<uint32_t> kSpecialF32 = {
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  // ±0, ±inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA5A5A5,  // NaNs
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,  // subnormals
    0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,  // smallest normals, largest finite
    0x3F800000, 0xBF800000};
const std::vector<uint16_t> kSpecialBF16 = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81,
                                            0x7FFF, 0xFFFF, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080,
                                            0x7F7F, 0xFF7F, 0x3F80, 0xBF80};
const std::vector<uint16_t> kSpecialF16 = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01,
                                           0x7FFF, 0xFFFF, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400,
                                           0x7BFF, 0xFBFF, 0x3C00, 0xBC00};

// bf16 -> double, with the pattern just past the largest finite value standing for 2^128, the point
// where round-to-nearest switches to infinity.
double bf16_value(uint16_t b) {
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if ((b & 0x7FFF) == 0x7F80) return sign * std::ldexp(1.0, 128);
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even by comparing the distances to the two neighbours, in double.
uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t down = static_cast<uint16_t>(u >> 16);  // truncated: toward zero
  if ((u & 0xFFFF) == 0) return down;
  const uint16_t up = static_cast<uint16_t>(down + 1);  // one ulp further from zero
  const double d_down = std::fabs(double{f} - bf16_value(down));
  const double d_up = std::fabs(bf16_value(up) - double{f});
  if (d_down < d_up) return down;
  if (d_up < d_down) return up;
  return (down & 1) ? up : down;
}

}  // namespace

std::vector<uint8_t> random_values(DType dtype, size_t n) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto& gen = rng();
  for (size_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(gen() % 8);  // 0: special, 1: random bits, else: an ordinary number
    if (dtype == DType::kFloat32) {
      uint32_t u;
      if (kind == 0) {
        u = kSpecialF32[gen() % kSpecialF32.size()];
      } else if (kind == 1) {
        u = static_cast<uint32_t>(gen());
      } else {
        const float f = normal(gen);
        std::memcpy(&u, &f, 4);
      }
      std::memcpy(&out[4 * i], &u, 4);
    } else {
      const auto& specials = dtype == DType::kBFloat16 ? kSpecialBF16 : kSpecialF16;
      uint16_t b;
      if (kind == 0) {
        b = specials[gen() % specials.size()];
      } else if (kind == 1) {
        b = static_cast<uint16_t>(gen());
      } else {
        store_float(dtype, normal(gen), out.data(), i);
        continue;
      }
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

std::vector<uint64_t> random_plane(size_t n, double density) {
  std::vector<uint64_t> plane(words_for(n), 0);
  std::bernoulli_distribution coin(density);
  for (size_t j = 0; j < n; ++j) set_bit(plane.data(), j, coin(rng()));
  return plane;
}

std::vector<uint64_t> dirty_words(size_t nwords) { return std::vector<uint64_t>(nwords, ~uint64_t{0}); }

namespace {

// fp16 conversions by the compiler's own half type: ARM's __fp16 on aarch64 (g++ 12 has no _Float16 in
// C++ there), _Float16 where the compiler has it (g++ on x86-64), else the CPU's F16C instructions
// (clang on x86-64 before version 15). Either way not pride's own code.
#if defined(__aarch64__) || defined(__FLT16_MAX__)
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif
float half_to_float(uint16_t bits) {
  CompilerHalf h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}
uint16_t float_to_half(float f) {
  const CompilerHalf h = static_cast<CompilerHalf>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
#else
__attribute__((target("f16c"))) float half_to_float(uint16_t bits) { return _cvtsh_ss(bits); }
__attribute__((target("f16c"))) uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
#endif

}  // namespace

float to_float(DType dtype, const uint8_t* values, size_t i) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, values + 4 * i, 4);
      return f;
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, values + 2 * i, 2);
      const uint32_t u = uint32_t{b} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, values + 2 * i, 2);
      return half_to_float(h);
    }
    case DType::kInt8: return static_cast<float>(static_cast<int8_t>(values[i]));
  }
  return 0.0f;
}

void store_float(DType dtype, float f, uint8_t* values, size_t i) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(values + 4 * i, &f, 4); break;
    case DType::kBFloat16: {
      const uint16_t b = float_to_bf16(f);
      std::memcpy(values + 2 * i, &b, 2);
      break;
    }
    case DType::kFloat16: {
      const uint16_t h = float_to_half(f);
      std::memcpy(values + 2 * i, &h, 2);
      break;
    }
    case DType::kInt8: values[i] = static_cast<uint8_t>(static_cast<int8_t>(f)); break;
  }
}

bool is_nan(DType dtype, const uint8_t* values, size_t i) {
  return dtype != DType::kInt8 && std::isnan(to_float(dtype, values, i));
}

bool bit(const uint64_t* plane, size_t j) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(plane);
  return (bytes[j / 8] >> (j % 8)) & 1;
}

void set_bit(uint64_t* plane, size_t j, bool value) {
  auto* bytes = reinterpret_cast<uint8_t*>(plane);
  if (value) {
    bytes[j / 8] = static_cast<uint8_t>(bytes[j / 8] | (1u << (j % 8)));
  } else {
    bytes[j / 8] = static_cast<uint8_t>(bytes[j / 8] & ~(1u << (j % 8)));
  }
}

void expect_trailing_zero(const std::vector<uint64_t>& plane, size_t n, const char* what) {
  for (size_t j = n; j < 64 * plane.size(); ++j) ASSERT_FALSE(bit(plane.data(), j)) << what << ": bit " << j << " of n=" << n;
}

std::vector<uint64_t> encode_counter(const std::vector<int32_t>& values, int planes) {
  const size_t nwords = words_for(values.size());
  std::vector<uint64_t> counter(planes * nwords, 0);
  for (size_t j = 0; j < values.size(); ++j)
    for (int p = 0; p < planes; ++p) set_bit(counter.data() + p * nwords, j, (values[j] >> p) & 1);
  return counter;
}

std::vector<int32_t> decode_counter(const uint64_t* counter, int planes, size_t n) {
  const size_t nwords = words_for(n);
  std::vector<int32_t> values(n, 0);
  for (size_t j = 0; j < n; ++j)
    for (int p = 0; p < planes; ++p) values[j] |= int32_t{bit(counter + p * nwords, j)} << p;
  return values;
}

void expect_same_value(DType dtype, const uint8_t* expected, const uint8_t* actual, size_t i, const char* what) {
  const size_t size = dtype_size(dtype);
  if (is_nan(dtype, expected, i)) {
    ASSERT_TRUE(is_nan(dtype, actual, i)) << what << ": element " << i << " should be NaN";
    return;
  }
  ASSERT_EQ(0, std::memcmp(expected + size * i, actual + size * i, size))
      << what << " " << dtype_name(dtype) << ": element " << i << " expected " << to_float(dtype, expected, i)
      << " got " << to_float(dtype, actual, i);
}

}  // namespace pride::bits::test
