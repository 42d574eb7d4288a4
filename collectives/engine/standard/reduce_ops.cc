#include "collectives/engine/standard/reduce_ops.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/common/error.h"
// The kernels' conversions, in a namespace of their own (element_traits.h is included per ISA).
#define PRIDE_KERNEL_NS standard_reduce
#include "collectives/bits/element_traits.h"
#undef PRIDE_KERNEL_NS

namespace pride {
namespace standard {
namespace {

// Storage of the element types that need a representation of their own.
struct Float16 { uint16_t bits; };
struct BFloat16 { uint16_t bits; };
template <typename T>
struct Complex { T re, im; };

// ---- Element operations, one overload set per kind of type --------------------------------------

// Integers. Arithmetic goes through an unsigned type at least as wide as int, so signed overflow
// wraps as torch's does instead of being undefined, and uint16 * uint16 does not overflow int.
template <typename T>
struct IntegerOps {
  using Wide = std::conditional_t<(sizeof(T) < sizeof(uint32_t)), uint32_t, std::make_unsigned_t<T>>;
  static T sum(T a, T b) { return static_cast<T>(static_cast<Wide>(a) + static_cast<Wide>(b)); }
  static T product(T a, T b) { return static_cast<T>(static_cast<Wide>(a) * static_cast<Wide>(b)); }
  static T min(T a, T b) { return b < a ? b : a; }
  static T max(T a, T b) { return a < b ? b : a; }
  static T band(T a, T b) { return static_cast<T>(a & b); }
  static T bor(T a, T b) { return static_cast<T>(a | b); }
  static T bxor(T a, T b) { return static_cast<T>(a ^ b); }
};

// bool is one byte holding 0 or 1; any non-zero byte reads as true.
struct BoolOps {
  using T = uint8_t;
  static T sum(T a, T b) { return (a != 0) | (b != 0); }
  static T product(T a, T b) { return (a != 0) & (b != 0); }
  static T min(T a, T b) { return product(a, b); }
  static T max(T a, T b) { return sum(a, b); }
  static T band(T a, T b) { return product(a, b); }
  static T bor(T a, T b) { return sum(a, b); }
  static T bxor(T a, T b) { return (a != 0) ^ (b != 0); }
};

// float and double. MIN/MAX return the NaN operand when there is one.
template <typename T>
struct FloatOps {
  static T sum(T a, T b) { return a + b; }
  static T product(T a, T b) { return a * b; }
  static T min(T a, T b) { return std::isnan(a) ? a : (std::isnan(b) ? b : (b < a ? b : a)); }
  static T max(T a, T b) { return std::isnan(a) ? a : (std::isnan(b) ? b : (a < b ? b : a)); }
  static T divide(T a, int n) { return a / static_cast<T>(n); }
};

// float16 and bfloat16: widen, compute in float, round once per op.
template <typename T, float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct HalfOps {
  static float f(T x) { return ToFloat(x.bits); }
  static T h(float x) { return T{FromFloat(x)}; }
  static T sum(T a, T b) { return h(f(a) + f(b)); }
  static T product(T a, T b) { return h(f(a) * f(b)); }
  // The result is one of the operands, so no rounding is involved.
  static T min(T a, T b) { return std::isnan(f(a)) ? a : (std::isnan(f(b)) ? b : (f(b) < f(a) ? b : a)); }
  static T max(T a, T b) { return std::isnan(f(a)) ? a : (std::isnan(f(b)) ? b : (f(a) < f(b) ? b : a)); }
  static T divide(T a, int n) { return h(f(a) / static_cast<float>(n)); }
};
namespace half = bits::detail::standard_reduce;
using Float16Ops = HalfOps<Float16, half::f16_to_f32, half::f32_to_f16>;
using BFloat16Ops = HalfOps<BFloat16, half::bf16_to_f32, half::f32_to_bf16>;

template <typename T>
struct ComplexOps {
  using C = Complex<T>;
  static C sum(C a, C b) { return {a.re + b.re, a.im + b.im}; }
  static C product(C a, C b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
  static C divide(C a, int n) { return {a.re / static_cast<T>(n), a.im / static_cast<T>(n)}; }
};

// complex32: each part summed and divided as a float16 is (float arithmetic, rounded to half), as torch's
// c10::complex<c10::Half> adds. No product: torch.distributed allows only SUM and AVG on complex
// tensors, and a product rounded part by part would not be torch's complex multiplication.
struct Complex32Ops {
  using C = Complex<Float16>;
  static C sum(C a, C b) { return {Float16Ops::sum(a.re, b.re), Float16Ops::sum(a.im, b.im)}; }
  static C divide(C a, int n) { return {Float16Ops::divide(a.re, n), Float16Ops::divide(a.im, n)}; }
};

// ---- Loops --------------------------------------------------------------------------------------

// F is a lambda, not a function pointer, so each loop is instantiated with its op inlined.
template <typename T, typename F>
void apply(void* dst, const void* a, const void* b, size_t count, F f) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = f(x[i], y[i]);
}

// The ops every kind has; returns false when `op` is not one of them.
template <typename T, typename Ops>
bool reduce_arithmetic(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::sum(x, y); }); return true;
    case ReduceOp::kProduct: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::product(x, y); }); return true;
    default: return false;
  }
}

template <typename T, typename Ops>
bool reduce_ordered(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (reduce_arithmetic<T, Ops>(op, dst, a, b, count)) return true;
  switch (op) {
    case ReduceOp::kMin: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::min(x, y); }); return true;
    case ReduceOp::kMax: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::max(x, y); }); return true;
    default: return false;
  }
}

template <typename T, typename Ops>
bool reduce_bitwise(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (reduce_ordered<T, Ops>(op, dst, a, b, count)) return true;
  switch (op) {
    case ReduceOp::kBand: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::band(x, y); }); return true;
    case ReduceOp::kBor: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::bor(x, y); }); return true;
    case ReduceOp::kBxor: apply<T>(dst, a, b, count, [](T x, T y) { return Ops::bxor(x, y); }); return true;
    default: return false;
  }
}

template <typename T, typename Ops>
bool reduce_sums(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) return false;
  apply<T>(dst, a, b, count, [](T x, T y) { return Ops::sum(x, y); });
  return true;
}

template <typename T>
bool reduce_integer(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  return op != ReduceOp::kAvg && reduce_bitwise<T, IntegerOps<T>>(op, dst, a, b, count);
}

bool dispatch(ReduceOp op, ScalarType type, void* dst, const void* a, const void* b, size_t count) {
  switch (type) {
    case ScalarType::kBool: return op != ReduceOp::kAvg && reduce_bitwise<uint8_t, BoolOps>(op, dst, a, b, count);
    case ScalarType::kUInt8: return reduce_integer<uint8_t>(op, dst, a, b, count);
    case ScalarType::kInt8: return reduce_integer<int8_t>(op, dst, a, b, count);
    case ScalarType::kInt16: return reduce_integer<int16_t>(op, dst, a, b, count);
    case ScalarType::kInt32: return reduce_integer<int32_t>(op, dst, a, b, count);
    case ScalarType::kInt64: return reduce_integer<int64_t>(op, dst, a, b, count);
    case ScalarType::kUInt16: return reduce_integer<uint16_t>(op, dst, a, b, count);
    case ScalarType::kUInt32: return reduce_integer<uint32_t>(op, dst, a, b, count);
    case ScalarType::kUInt64: return reduce_integer<uint64_t>(op, dst, a, b, count);
    case ScalarType::kFloat16: return reduce_ordered<Float16, Float16Ops>(op, dst, a, b, count);
    case ScalarType::kBFloat16: return reduce_ordered<BFloat16, BFloat16Ops>(op, dst, a, b, count);
    case ScalarType::kFloat32: return reduce_ordered<float, FloatOps<float>>(op, dst, a, b, count);
    case ScalarType::kFloat64: return reduce_ordered<double, FloatOps<double>>(op, dst, a, b, count);
    case ScalarType::kComplex64: return reduce_arithmetic<Complex<float>, ComplexOps<float>>(op, dst, a, b, count);
    case ScalarType::kComplex128:
      return reduce_arithmetic<Complex<double>, ComplexOps<double>>(op, dst, a, b, count);
    case ScalarType::kComplex32: return reduce_sums<Complex<Float16>, Complex32Ops>(op, dst, a, b, count);
  }
  return false;
}

bool is_floating(ScalarType type) {
  return type == ScalarType::kFloat16 || type == ScalarType::kBFloat16 || type == ScalarType::kFloat32 ||
         type == ScalarType::kFloat64;
}
bool is_complex(ScalarType type) {
  return type == ScalarType::kComplex32 || type == ScalarType::kComplex64 || type == ScalarType::kComplex128;
}

template <typename T, typename Ops>
void divide_loop(void* buf, size_t count, int divisor) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = Ops::divide(p[i], divisor);
}

}  // namespace

void reduce_elements(ReduceOp op, ScalarType type, void* dst, const void* a, const void* b, size_t count) {
  PRIDE_ENFORCE(dispatch(op, type, dst, a, b, count), "no reduction kernel for {} on {}", reduce_op_name(op),
                scalar_name(type));
}

void divide_elements(ScalarType type, void* buf, size_t count, int divisor) {
  switch (type) {
    case ScalarType::kFloat16: return divide_loop<Float16, Float16Ops>(buf, count, divisor);
    case ScalarType::kBFloat16: return divide_loop<BFloat16, BFloat16Ops>(buf, count, divisor);
    case ScalarType::kFloat32: return divide_loop<float, FloatOps<float>>(buf, count, divisor);
    case ScalarType::kFloat64: return divide_loop<double, FloatOps<double>>(buf, count, divisor);
    case ScalarType::kComplex64: return divide_loop<Complex<float>, ComplexOps<float>>(buf, count, divisor);
    case ScalarType::kComplex128: return divide_loop<Complex<double>, ComplexOps<double>>(buf, count, divisor);
    case ScalarType::kComplex32: return divide_loop<Complex<Float16>, Complex32Ops>(buf, count, divisor);
    default: break;
  }
  throw Error(fmt::format("divide_elements: {} is neither floating nor complex", scalar_name(type)));
}

}  // namespace standard

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kBand: return "BAND";
    case ReduceOp::kBor: return "BOR";
    case ReduceOp::kBxor: return "BXOR";
  }
  return "unknown";
}

void check_reduce_op(ReduceOp op, ScalarType type) {
  scalar_size(type);  // throws on a type outside the enum
  bool ok = false;
  switch (op) {
    case ReduceOp::kSum: ok = true; break;
    case ReduceOp::kProduct: ok = type != ScalarType::kComplex32; break;  // see Complex32Ops
    case ReduceOp::kAvg: ok = standard::is_floating(type) || standard::is_complex(type); break;
    case ReduceOp::kMin:
    case ReduceOp::kMax: ok = !standard::is_complex(type); break;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: ok = !standard::is_floating(type) && !standard::is_complex(type); break;
  }
  PRIDE_CHECK_ARG(ok, "reduce op {} is not defined for dtype {}", reduce_op_name(op), scalar_name(type));
}

}  // namespace pride
