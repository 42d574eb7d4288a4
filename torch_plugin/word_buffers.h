// Bit planes and packed votes kept in torch tensors, on a GPU or in pinned host memory. The words are
// 64-bit and unsigned; the tensors hold them as int64 (kLong), which every supported torch release can
// allocate, pin and copy, and the plugin's code sees them through words_of().
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace pride::torch_plugin {

// Options for word tensors on `device`; pinned applies to host memory (staging for device copies).
inline at::TensorOptions word_options(c10::Device device, bool pinned = false) {
  auto options = at::TensorOptions().dtype(at::kLong).device(device);
  return pinned ? options.pinned_memory(true) : options;
}

// A tensor of `count` words, at least one: an empty range still gets a valid pointer to pass around.
inline at::Tensor empty_words(size_t count, const at::TensorOptions& options) {
  return at::empty({int64_t(std::max<size_t>(count, 1))}, options);
}

// At least `count` words in `t`: allocated or grown, never shrunk, so buffers reused across calls
// settle at their largest size.
inline void ensure_words(at::Tensor& t, size_t count, const at::TensorOptions& options) {
  if (!t.defined() || size_t(t.numel()) < count) t = empty_words(count, options);
}

inline uint64_t* words_of(const at::Tensor& t) { return reinterpret_cast<uint64_t*>(t.data_ptr<int64_t>()); }

}  // namespace pride::torch_plugin
