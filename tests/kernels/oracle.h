// Test oracles for the bit kernels, written the obvious way: one element at a time, bytes in numpy's
// bitorder="little" layout, int32 sums of ±1, and conversions that do not share code with the kernels.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "collectives/bits/kernels.h"

namespace pride::bits::test {

// ---- ISA parameterisation ---------------------------------------------------------------------------
// Every kernel test runs once per ISA; AVX2 is skipped on CPUs without it. The fixture restores the
// ISA that was active before the test.
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override;
  void TearDown() override;

 private:
  Isa saved_ = Isa::kScalar;
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info);

#define PRIDE_INSTANTIATE_ISA_TESTS(Fixture)                                                           \
  INSTANTIATE_TEST_SUITE_P(Isa, Fixture, ::testing::Values(::pride::bits::Isa::kScalar, ::pride::bits::Isa::kAvx2), \
                           ::pride::bits::test::isa_param_name)

// ---- Inputs -------------------------------------------------------------------------------------------
// 0, 1, the word and byte boundaries, a few larger and random odd lengths up to 10^5.
const std::vector<size_t>& lengths();
// A shorter list for sweeps over many ranks.
const std::vector<size_t>& short_lengths();

std::mt19937_64& rng();

// Random values of dtype (raw bytes, n elements): ordinary numbers of both signs mixed with every
// special pattern (±0, NaNs with both signs and several payloads, ±inf, subnormals, smallest normals).
std::vector<uint8_t> random_values(DType dtype, size_t n);
// Random plane of n elements, with zero trailing bits; density is the probability of a 1.
std::vector<uint64_t> random_plane(size_t n, double density = 0.5);
// A buffer for a kernel's plane output, prefilled with ones so that unwritten bits show.
std::vector<uint64_t> dirty_words(size_t nwords);

// ---- Element oracles --------------------------------------------------------------------------------
float to_float(DType dtype, const uint8_t* values, size_t i);       // exact widening
void store_float(DType dtype, float f, uint8_t* values, size_t i);  // round to nearest even
bool is_nan(DType dtype, const uint8_t* values, size_t i);

// numpy layout: element j is bit j % 8 of byte j / 8.
bool bit(const uint64_t* plane, size_t j);
void set_bit(uint64_t* plane, size_t j, bool value);
// Bits past n must be zero.
void expect_trailing_zero(const std::vector<uint64_t>& plane, size_t n, const char* what);

// Bit-sliced counter <-> integers (plane-major, planes * words_for(n) words).
std::vector<uint64_t> encode_counter(const std::vector<int32_t>& values, int planes);
std::vector<int32_t> decode_counter(const uint64_t* counter, int planes, size_t n);

// Compares element i of two dtype buffers: equal bits, or both NaN.
void expect_same_value(DType dtype, const uint8_t* expected, const uint8_t* actual, size_t i, const char* what);

}  // namespace pride::bits::test
