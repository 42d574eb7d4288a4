// CPU bit kernels of sign-allreduce: pack, bit-sliced counters, thresholds, unpack, fused apply.
//
// Layout (SPEC §2): element j of a packed vote plane is bit (j % 64) of 64-bit word j / 64, which on a
// little-endian host is exactly bit (j % 8) of byte j / 8 (numpy bitorder="little"). Kernels work on
// whole words; bits past the last element are written as zero and ignored on read.
//
// A counter of P planes over `nwords` words is stored plane-major: plane p (bit p of every element's
// count) occupies words [p * nwords, (p + 1) * nwords). All planes of a counter are written by the
// kernel that produces it; none of them is read past what its `planes` argument says.
//
// Every kernel exists twice, portable C++ and AVX2, chosen once at run time from the CPU's features
// (PRIDE_KERNEL_ISA=scalar|avx2|auto overrides; set_isa() does the same from code and tests).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pride::bits {

// Element types the kernels read and write. bf16 and fp16 are passed as raw uint16_t bit patterns.
enum class DType : uint8_t { kFloat32, kBFloat16, kFloat16, kInt8 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

enum class Isa : uint8_t { kScalar, kAvx2 };
const char* isa_name(Isa isa);
Isa active_isa();        // what the kernels below dispatch to now
bool isa_supported(Isa isa);
void set_isa(Isa isa);   // throws std::invalid_argument when the CPU lacks it

constexpr size_t words_for(size_t n) { return (n + 63) / 64; }
constexpr size_t bytes_for(size_t n) { return (n + 7) / 8; }
// Planes needed to hold any count in [0, max_count]: ceil(log2(max_count + 1)), at least 1.
int planes_for(int64_t max_count);

// ---- Pack ------------------------------------------------------------------------------------
// Binary votes: bit = 1 where x > 0 (so +0, -0 and NaN vote -1). float32/bf16/fp16 input.
void pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane);
// Ternary votes: pos bit where x > 0, neg bit where x < 0; ±0 and NaN set neither (abstain).
void pack_ternary(const void* x, DType dtype, size_t n, uint64_t* pos, uint64_t* neg);

// ---- Bit-sliced counters ---------------------------------------------------------------------
// counter += plane. The caller guarantees no overflow (the counter has planes_for(max+1) planes).
void counter_add_plane(uint64_t* counter, int planes, size_t nwords, const uint64_t* plane);
// acc += other (ripple of full adders). other_planes <= acc_planes; no overflow.
void counter_add(uint64_t* acc, int acc_planes, const uint64_t* other, int other_planes, size_t nwords);
// counter = sum of nplanes vote planes (positional popcount with carry-save adders). Writes all
// counter_planes planes; counter_planes >= planes_for(nplanes).
void count_planes(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                  int counter_planes);
// out = pos - neg + offset for ternary counts (pos, neg <= offset), as an unsigned counter of
// out_planes >= planes_for(2 * offset) planes. Used to send ternary mean results. Output plane p at
// out + p * out_stride (0: nwords, the planes back to back); out_stride >= nwords otherwise.
void counter_signed_offset(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords,
                           int64_t offset, uint64_t* out, int out_planes, size_t out_stride = 0);

// ---- Thresholds ------------------------------------------------------------------------------
// Binary votes: count holds the number of +1 votes among nvotes. s = 2*count - nvotes;
// pos = (s > 0), tie = (s == 0). tie may be null (then ties are not reported; with odd nvotes none exist).
void vote_from_count(const uint64_t* count, int planes, size_t nwords, int64_t nvotes, uint64_t* pos,
                     uint64_t* tie);
// Ternary votes: s = pos_count - neg_count; pos = (s > 0), tie = (s == 0). tie may be null.
void vote_from_counts(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                      uint64_t* pos, uint64_t* tie);

// ---- Unpack ----------------------------------------------------------------------------------
// How unpack_vote writes y. A large output cannot stay in cache, and streaming (non-temporal) stores
// skip reading every destination line before overwriting it, a third of an unpack's memory traffic.
// kBySize streams outputs of kStreamingStoreBytes and more and keeps smaller ones in cache for the
// caller to read back; kStreaming streams at any size, for a piece of an output that is large as a
// whole (the sign-allreduce pipeline unpacks the caller's tensor in pieces of about 1 MiB). Either
// way only where y is 16-byte aligned (torch's tensors and malloc's blocks are), and the values are
// the same.
enum class OutputStores : uint8_t { kBySize, kStreaming };
inline constexpr size_t kStreamingStoreBytes = size_t(4) << 20;

// y = +1 where pos, 0 where tie (tie may be null), -1 elsewhere. Output float32/bf16/fp16/int8.
void unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype,
                 OutputStores stores = OutputStores::kBySize);
// Mean: per element, u = the count's value, s = scale*u - offset (binary: scale 2, offset N;
// ternary offset-encoded: scale 1, offset N); y = float32(s) / float32(nranks), cast to dtype.
void unpack_mean(const uint64_t* count, int planes, size_t n, int scale, int64_t offset, int64_t nranks,
                 void* y, DType dtype);

// ---- Fused apply of the optimizer update (Distributed Lion) -----------------------------------
// x <- x * (1 - lr*wd) - lr * delta, in two roundings like torch's p.mul_(1 - lr*wd).add_(delta, alpha=-lr):
//   factor = float(1.0 - lr*wd) (computed in double), x1 = round(float(x) * factor),
//   x2 = round(float(x1) - lr_d * delta)   (float32 arithmetic, rounding to dtype after each op), where
//   lr_d = float(lr) rounded to the dtype: torch rounds add_'s alpha to the tensor's dtype.
// delta as in unpack_vote (vote) or unpack_mean (mean, delta rounded to dtype first). No delta tensor exists.
void apply_vote(void* x, DType dtype, size_t n, const uint64_t* pos, const uint64_t* tie, double lr, double wd);
void apply_mean(void* x, DType dtype, size_t n, const uint64_t* count, int planes, int scale, int64_t offset,
                int64_t nranks, double lr, double wd);

// ---- Lion's local step (Distributed Lion) ------------------------------------------------------
// One pass over a tensor of gradients g and momentum m (same dtype): c = β1·m + (1−β1)·g is packed as
// votes (pos: c > 0; neg, unless null: c < 0), then m ← β2·m + (1−β2)·g in place. Every product and
// sum is a float32 operation rounded to the dtype (torch's m.mul(β1) + g.mul(1 − β1) on that dtype).
void lion_vote(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2, uint64_t* pos,
               uint64_t* neg);

// ---- Statistics ------------------------------------------------------------------------------
size_t popcount(const uint64_t* plane, size_t n);                         // set bits among the first n
size_t count_equal(const uint64_t* a, const uint64_t* b, size_t n);       // elements where the planes agree

}  // namespace pride::bits
