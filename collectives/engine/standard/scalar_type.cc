// Element sizes and printable names of ScalarType (names as torch prints dtypes).
#include "backend/common/error.h"
#include "collectives/engine/standard/collectives.h"

namespace pride {

size_t scalar_size(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
    case ScalarType::kUInt8:
    case ScalarType::kInt8: return 1;
    case ScalarType::kInt16:
    case ScalarType::kUInt16:
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16: return 2;
    case ScalarType::kInt32:
    case ScalarType::kUInt32:
    case ScalarType::kFloat32:
    case ScalarType::kComplex32: return 4;
    case ScalarType::kInt64:
    case ScalarType::kUInt64:
    case ScalarType::kFloat64:
    case ScalarType::kComplex64: return 8;
    case ScalarType::kComplex128: return 16;
  }
  throw InvalidArgument(fmt::format("unknown ScalarType {}", static_cast<int>(type)));
}

const char* scalar_name(ScalarType type) {
  switch (type) {
    case ScalarType::kBool: return "bool";
    case ScalarType::kUInt8: return "uint8";
    case ScalarType::kInt8: return "int8";
    case ScalarType::kInt16: return "int16";
    case ScalarType::kInt32: return "int32";
    case ScalarType::kInt64: return "int64";
    case ScalarType::kUInt16: return "uint16";
    case ScalarType::kUInt32: return "uint32";
    case ScalarType::kUInt64: return "uint64";
    case ScalarType::kFloat16: return "float16";
    case ScalarType::kBFloat16: return "bfloat16";
    case ScalarType::kFloat32: return "float32";
    case ScalarType::kFloat64: return "float64";
    case ScalarType::kComplex64: return "complex64";
    case ScalarType::kComplex128: return "complex128";
    case ScalarType::kComplex32: return "complex32";
  }
  return "unknown";
}

}  // namespace pride
