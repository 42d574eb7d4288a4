// AVX2 kernels. This translation unit alone is compiled with -mavx2 -mf16c -mpopcnt -mfma, and
// dispatch.cc calls into it only after checking the CPU for those features.
#define PRIDE_KERNEL_NS avx2

#include "collectives/bits/compressed_adam_impl.h"
#include "collectives/bits/counters_impl.h"
#include "collectives/bits/elementwise_avx2.h"
#include "collectives/bits/kernel_table.h"
#include "collectives/bits/levels_avx2.h"
#include "collectives/bits/lion_avx2.h"
#include "collectives/bits/lion_cub_impl.h"
#include "collectives/bits/lion_impl.h"
#include "collectives/bits/onebit_avx2.h"
#include "collectives/bits/plane_stats.h"
#include "collectives/bits/threshold_impl.h"

namespace pride::bits::detail {
namespace {

using namespace avx2;

// One ymm register of plane words per block.
using Block = uint64_t __attribute__((vector_size(32)));

}  // namespace

const KernelTable& avx2_table() {
  // Element kernels are indexed by DType: float32, bfloat16, float16, int8.
  static constexpr KernelTable table = {
      Isa::kAvx2,
      {pack_binary<Avx2F32>, pack_binary<Avx2BF16>, pack_binary<Avx2F16>, nullptr},
      {pack_ternary<Avx2F32>, pack_ternary<Avx2BF16>, pack_ternary<Avx2F16>, nullptr},
      {unpack_vote<F32>, unpack_vote<BF16>, unpack_vote<F16>, unpack_vote<I8>},
      {unpack_mean<Avx2F32>, unpack_mean<Avx2BF16>, unpack_mean<Avx2F16>, nullptr},
      {apply_vote<Avx2F32>, apply_vote<Avx2BF16>, apply_vote<Avx2F16>, nullptr},
      {apply_mean<Avx2F32>, apply_mean<Avx2BF16>, apply_mean<Avx2F16>, nullptr},
      {lion_vote_avx2<Avx2F32>, lion_vote_avx2<Avx2BF16>, lion_vote_avx2<Avx2F16>, nullptr},
      counter_add_plane<Block>,
      counter_add<Block>,
      count_planes<Block>,
      counter_signed_offset<Block>,
      vote_from_count<Block>,
      vote_from_counts<Block>,
      popcount,
      count_equal,
      {onebit_add_error_and_square_sum, onebit_square_sum_only, onebit_compress_signs, onebit_average_signs,
       onebit_expand_signs},
      {adam_local_step<F32>, adam_local_step<BF16>, adam_local_step<F16>, nullptr},
      {adam_sync<F32>, adam_sync<BF16>, adam_sync<F16>, nullptr},
      {adam_momentum<F32>, adam_momentum<BF16>, adam_momentum<F16>, nullptr},
      {adam_apply<F32>, adam_apply<BF16>, adam_apply<F16>, nullptr},
      pack_levels_avx2,
      {lion_cub_interpolate<F32>, lion_cub_interpolate<BF16>, nullptr, nullptr},  // float16: lion_cub.h
      lion_cub_levels,
      {lion_cub_apply_sign<F32>, lion_cub_apply_sign<BF16>, nullptr, nullptr},
  };
  return table;
}

}  // namespace pride::bits::detail
