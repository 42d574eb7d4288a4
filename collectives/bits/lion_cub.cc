// The public Lion Cub passes: argument checks, the python floats made float32 as torch casts them, then
// a call through the active ISA's table (lion_cub_impl.h), whose variants give identical bits.
#include "collectives/bits/lion_cub.h"

#include <stdexcept>
#include <string>

#include "collectives/bits/element_kernel.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits {

using detail::element_kernel;

InterpolationStats lion_cub_interpolate(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2,
                                        float* c) {
  const detail::LionParams p{static_cast<float>(beta1), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
                             static_cast<float>(1.0 - beta2)};
  return element_kernel(detail::active_table().lion_cub_interpolate, dtype, "lion_cub_interpolate")(g, m, n, p, c);
}

void lion_cub_signs(const float* c, size_t n, int8_t* q) {
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(int(c[i] > 0.0f) - int(c[i] < 0.0f));
}

void lion_cub_levels(const float* c, size_t n, float scale, int max_level, int8_t* q) {
  if (!(scale > 0.0f)) throw std::invalid_argument("lion_cub_levels: the scale must be > 0, got " + std::to_string(scale));
  if (max_level < 1 || max_level > 127) {
    throw std::invalid_argument("lion_cub_levels: max_level must be in [1, 127], got " + std::to_string(max_level));
  }
  detail::active_table().lion_cub_levels(c, n, scale, max_level, q);
}

void lion_cub_apply_sign(void* x, DType dtype, size_t n, const int8_t* total, double lr, double wd) {
  const detail::ApplyParams a{static_cast<float>(1.0 - lr * wd), static_cast<float>(lr)};
  element_kernel(detail::active_table().lion_cub_apply_sign, dtype, "lion_cub_apply_sign")(x, n, total, a);
}

}  // namespace pride::bits
