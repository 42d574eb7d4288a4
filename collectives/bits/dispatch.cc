// The public kernel API: argument checks, then a call through the table of the active ISA. The ISA
// is chosen once, on first use, from the CPU and PRIDE_KERNEL_ISA; set_isa() switches it later.
#include <atomic>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "collectives/bits/element_kernel.h"
#include "collectives/bits/kernel_table.h"
#include "collectives/bits/kernels.h"

namespace pride::bits {
namespace {

using detail::KernelTable;

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(PRIDE_HAVE_AVX2_KERNELS)
  // f16c (fp16 <-> float32 conversions) and fma (compressed Adam's lerp) are part of the AVX2 path
  // too; every AVX2 CPU has them, but a virtual machine may hide them. f16c straight from cpuid (leaf 1,
  // ecx): clang before 15 does not know it as a __builtin_cpu_supports feature.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

const KernelTable& table_for(Isa isa) {
#if defined(PRIDE_HAVE_AVX2_KERNELS)
  if (isa == Isa::kAvx2) return detail::avx2_table();
#endif
  (void)isa;
  return detail::portable_table();
}

// Read here, not with the other settings (backend/common/settings.cc): the kernels are also used
// without a communicator (the C++ API, the CPU optimizers of a world of one). Any case, as PRIDE_DEBUG.
const KernelTable& initial_table() {
  const char* env = std::getenv("PRIDE_KERNEL_ISA");
  std::string choice = env ? env : "auto";
  for (char& c : choice) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (choice == "scalar") return table_for(Isa::kScalar);
  if (choice == "avx2") {
    if (!cpu_has_avx2()) throw std::invalid_argument("pride: PRIDE_KERNEL_ISA=avx2, but this CPU or build lacks AVX2");
    return table_for(Isa::kAvx2);
  }
  if (choice == "auto" || choice.empty()) return table_for(cpu_has_avx2() ? Isa::kAvx2 : Isa::kScalar);
  throw std::invalid_argument("pride: PRIDE_KERNEL_ISA must be scalar, avx2 or auto (any case), not '" +
                              std::string(env) + "'");
}

std::atomic<const KernelTable*>& active_slot() {
  static std::atomic<const KernelTable*> slot{&initial_table()};
  return slot;
}

const KernelTable& active() { return *active_slot().load(std::memory_order_relaxed); }

}  // namespace

const detail::KernelTable& detail::active_table() { return active(); }

namespace {

using detail::dtype_index;
using detail::element_kernel;

void check_planes(int planes, const char* what) {
  if (planes < 1 || planes > detail::kMaxPlanes)
    throw std::invalid_argument(std::string(what) + ": planes must be in [1, 32], got " + std::to_string(planes));
}

detail::MeanParams mean_params(int scale, int64_t offset, int64_t nranks) {
  if (nranks < 1) throw std::invalid_argument("unpack_mean/apply_mean: nranks must be positive");
  return {scale, offset, static_cast<float>(nranks)};
}

detail::ApplyParams apply_params(double lr, double wd) {
  return {static_cast<float>(1.0 - lr * wd), static_cast<float>(lr)};
}

}  // namespace

size_t dtype_size(DType dtype) {
  static constexpr size_t kSizes[detail::kNumDTypes] = {4, 2, 2, 1};
  return kSizes[dtype_index(dtype)];
}

const char* dtype_name(DType dtype) {
  static constexpr const char* kNames[detail::kNumDTypes] = {"float32", "bfloat16", "float16", "int8"};
  return kNames[dtype_index(dtype)];
}

const char* isa_name(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

Isa active_isa() { return active().isa; }

bool isa_supported(Isa isa) { return isa == Isa::kScalar || cpu_has_avx2(); }

void set_isa(Isa isa) {
  if (!isa_supported(isa)) throw std::invalid_argument(std::string("ISA not supported here: ") + isa_name(isa));
  active_slot().store(&table_for(isa), std::memory_order_relaxed);
}

int planes_for(int64_t max_count) {
  int planes = 1;
  while (planes < 63 && (int64_t{1} << planes) <= max_count) ++planes;
  return planes;
}

void pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane) {
  element_kernel(active().pack_binary, dtype, "pack_binary")(x, n, plane);
}

void pack_ternary(const void* x, DType dtype, size_t n, uint64_t* pos, uint64_t* neg) {
  element_kernel(active().pack_ternary, dtype, "pack_ternary")(x, n, pos, neg);
}

void counter_add_plane(uint64_t* counter, int planes, size_t nwords, const uint64_t* plane) {
  check_planes(planes, "counter_add_plane");
  active().counter_add_plane(counter, planes, nwords, plane);
}

void counter_add(uint64_t* acc, int acc_planes, const uint64_t* other, int other_planes, size_t nwords) {
  check_planes(acc_planes, "counter_add");
  if (other_planes < 1 || other_planes > acc_planes)
    throw std::invalid_argument("counter_add: other_planes must be in [1, acc_planes]");
  active().counter_add(acc, acc_planes, other, other_planes, nwords);
}

void count_planes(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                  int counter_planes) {
  if (nplanes < 0) throw std::invalid_argument("count_planes: negative nplanes");
  check_planes(counter_planes, "count_planes");
  if (counter_planes < planes_for(nplanes)) throw std::invalid_argument("count_planes: counter too narrow");
  active().count_planes(planes, nplanes, nwords, counter, counter_planes);
}

void counter_signed_offset(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords, int64_t offset,
                           uint64_t* out, int out_planes, size_t out_stride) {
  check_planes(planes, "counter_signed_offset");
  check_planes(out_planes, "counter_signed_offset");
  if (offset < 0 || out_planes < planes_for(2 * offset))
    throw std::invalid_argument("counter_signed_offset: offset negative or out_planes too narrow");
  if (out_stride == 0) out_stride = nwords;
  if (out_stride < nwords) throw std::invalid_argument("counter_signed_offset: out_stride below nwords");
  active().counter_signed_offset(pos, neg, planes, nwords, static_cast<uint64_t>(offset), out, out_planes,
                                 out_stride);
}

void vote_from_count(const uint64_t* count, int planes, size_t nwords, int64_t nvotes, uint64_t* pos,
                     uint64_t* tie) {
  check_planes(planes, "vote_from_count");
  if (nvotes < 0) throw std::invalid_argument("vote_from_count: negative nvotes");
  active().vote_from_count(count, planes, nwords, static_cast<uint64_t>(nvotes / 2), nvotes % 2 == 0, pos, tie);
}

void vote_from_counts(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                      uint64_t* pos, uint64_t* tie) {
  check_planes(planes, "vote_from_counts");
  active().vote_from_counts(pos_count, neg_count, planes, nwords, pos, tie);
}

void unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype, OutputStores stores) {
  element_kernel(active().unpack_vote, dtype, "unpack_vote")(pos, tie, n, y, stores);
}

void unpack_mean(const uint64_t* count, int planes, size_t n, int scale, int64_t offset, int64_t nranks, void* y,
                 DType dtype) {
  check_planes(planes, "unpack_mean");
  const auto fn = element_kernel(active().unpack_mean, dtype, "unpack_mean");
  fn(count, planes, n, mean_params(scale, offset, nranks), y);
}

void apply_vote(void* x, DType dtype, size_t n, const uint64_t* pos, const uint64_t* tie, double lr, double wd) {
  element_kernel(active().apply_vote, dtype, "apply_vote")(x, n, pos, tie, apply_params(lr, wd));
}

void apply_mean(void* x, DType dtype, size_t n, const uint64_t* count, int planes, int scale, int64_t offset,
                int64_t nranks, double lr, double wd) {
  check_planes(planes, "apply_mean");
  const auto fn = element_kernel(active().apply_mean, dtype, "apply_mean");
  fn(x, n, count, planes, mean_params(scale, offset, nranks), apply_params(lr, wd));
}

void lion_vote(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2, uint64_t* pos,
               uint64_t* neg) {
  // Finite betas: the AVX2 code's intermediate roundings keep only the NaNs that finite arithmetic on
  // the dtype's values can make (elementwise_avx2.h).
  if (!std::isfinite(beta1) || !std::isfinite(beta2)) throw std::invalid_argument("lion_vote: betas must be finite");
  const detail::LionParams p{static_cast<float>(beta1), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
                             static_cast<float>(1.0 - beta2)};
  element_kernel(active().lion_vote, dtype, "lion_vote")(g, m, n, p, pos, neg);
}

size_t popcount(const uint64_t* plane, size_t n) { return active().popcount(plane, n); }

size_t count_equal(const uint64_t* a, const uint64_t* b, size_t n) { return active().count_equal(a, b, n); }

}  // namespace pride::bits
