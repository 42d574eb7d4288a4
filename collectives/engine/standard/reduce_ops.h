// Element-wise reduction kernels of the standard collectives, for every ScalarType x ReduceOp that
// check_reduce_op() accepts. Semantics follow torch:
// - integers wrap around on SUM and PRODUCT (two's complement, never undefined behaviour);
// - bool: SUM and MAX are logical or, PRODUCT and MIN logical and, BXOR is inequality;
// - MIN and MAX propagate NaN (torch.minimum / torch.maximum);
// - float16 and bfloat16 are computed in float and rounded to nearest even after every op;
// - complex PRODUCT is the textbook (ac - bd, ad + bc), as c10::complex computes it;
// - AVG reduces as SUM; the collective divides by the group size once, at the end (divide_elements()).
#pragma once

#include <cstddef>

#include "collectives/engine/standard/collectives.h"

namespace pride::standard {

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b (element-wise, nothing is read twice).
// The operand order is part of the contract: the collectives pass the partial result of the ranks
// that come first in their fixed reduction order as `a`, so every rank computes the same bits.
void reduce_elements(ReduceOp op, ScalarType type, void* dst, const void* a, const void* b, size_t count);

// buf[i] /= divisor, in the element type (float16/bfloat16 through float, complex per component).
// Only for floating and complex types: the last step of AVG.
void divide_elements(ScalarType type, void* buf, size_t count, int divisor);

}  // namespace pride::standard
