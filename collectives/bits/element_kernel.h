// Internal: a kernel-table row's entry for a dtype, for the dispatching translation units (dispatch.cc,
// compressed_adam.cc). Not included by the ISA units, which must not share inline code with them
// (element_traits.h says why).
#pragma once

#include <stdexcept>
#include <string>

#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail {

// dtype's row in the per-dtype tables, or invalid_argument for a value outside the enum.
inline int dtype_index(DType dtype) {
  const int i = static_cast<int>(dtype);
  if (i < 0 || i >= kNumDTypes) throw std::invalid_argument("pride::bits: unknown dtype");
  return i;
}

// The kernel for dtype, or invalid_argument naming what was refused.
template <class Fn>
Fn element_kernel(Fn const (&entries)[kNumDTypes], DType dtype, const char* what) {
  Fn fn = entries[dtype_index(dtype)];
  if (!fn) throw std::invalid_argument(std::string(what) + " does not accept dtype " + dtype_name(dtype));
  return fn;
}

}  // namespace pride::bits::detail
