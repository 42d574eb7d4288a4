// The public fused 1-bit Adam and 0/1 Adam steps: the python floats become float32 as torch casts them
// (compressed_adam_params.h), then a call through the active ISA's table (compressed_adam_impl.h),
// whose variants give identical bits.
#include "collectives/bits/compressed_adam.h"

#include "collectives/bits/compressed_adam_params.h"
#include "collectives/bits/element_kernel.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits {

using detail::element_kernel;

void zero_one_adam_local_step(void* p, const void* g, DType dtype, float* m, const float* v, float* acc, size_t n,
                              const AdamLocalStep& step, float* scaled) {
  element_kernel(detail::active_table().adam_local_step, dtype, "zero_one_adam_local_step")(
      p, g, m, v, acc, n, detail::adam_local_params(step), scaled);
}

void zero_one_adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, DType dtype,
                        size_t n, const AdamSync& sync) {
  element_kernel(detail::active_table().adam_sync, dtype, "zero_one_adam_sync")(mean, v, m, anchor, acc, p, n,
                                                                                 detail::adam_sync_params(sync));
}

void onebit_adam_momentum(const void* g, DType dtype, float* m, size_t n, double beta1, float* out) {
  element_kernel(detail::active_table().adam_momentum, dtype, "onebit_adam_momentum")(
      g, m, out, n, static_cast<float>(1.0 - beta1));
}

void onebit_adam_apply(const float* mean, const float* v, float* m, void* p, DType dtype, size_t n,
                       const AdamApply& apply) {
  element_kernel(detail::active_table().adam_apply, dtype, "onebit_adam_apply")(
      mean, v, m, p, n, detail::adam_apply_params(apply));
}

}  // namespace pride::bits
