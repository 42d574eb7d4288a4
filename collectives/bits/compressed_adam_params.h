// The fused compressed-Adam steps' scalars as their kernels take them (kernel_table.h): the optimizers'
// python floats made float32 the way torch casts them. Shared by the CPU dispatch (compressed_adam.cc)
// and the CUDA launches (cuda/compressed_adam_kernels.cu).
#pragma once

#include "collectives/bits/compressed_adam.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail {

inline AdamLocalParams adam_local_params(const AdamLocalStep& step) {
  return {
      static_cast<float>(1.0 - step.beta1),
      static_cast<float>(1.0 - step.lr * step.weight_decay),
      static_cast<float>(step.eps),
      static_cast<float>(-step.step_size),
      static_cast<float>(step.bias_correction2_sqrt),
      step.weight_decay != 0.0,
      step.bias_correction,
  };
}

inline AdamSyncParams adam_sync_params(const AdamSync& sync) {
  return {static_cast<float>(sync.eps), static_cast<float>(-sync.lr_sum), sync.mask_zero_variance,
          sync.lr_sum > 0.0};
}

inline AdamApplyParams adam_apply_params(const AdamApply& apply) {
  return {
      static_cast<float>(1.0 - apply.lr * apply.weight_decay),
      static_cast<float>(apply.eps),
      static_cast<float>(-apply.step_size),
      static_cast<float>(apply.bias_correction2_sqrt),
      apply.weight_decay != 0.0,
      apply.bias_correction,
      apply.mask_zero_variance,
  };
}

}  // namespace pride::bits::detail
