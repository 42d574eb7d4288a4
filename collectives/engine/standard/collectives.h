// The standard collectives over a pride::Communicator, for CPU buffers of every dtype torch supports
// on CPU. Semantics follow torch.distributed; results are identical on every rank (fixed reduction
// order). Every call exchanges a fingerprint first, so ranks that disagree get MismatchError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/communicator.h"

namespace pride {

enum class ScalarType : uint8_t {
  kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kUInt16, kUInt32, kUInt64,
  kFloat16, kBFloat16, kFloat32, kFloat64, kComplex64, kComplex128,
  kComplex32,  // torch's complex32 (ComplexHalf): two float16 parts; SUM and AVG only. Last, so that the
               // codes before it keep their values in calls' fingerprints.
};
size_t scalar_size(ScalarType type);
const char* scalar_name(ScalarType type);

enum class ReduceOp : uint8_t { kSum, kAvg, kProduct, kMin, kMax, kBand, kBor, kBxor };
const char* reduce_op_name(ReduceOp op);
// Throws InvalidArgument when `op` is not defined for `type` (e.g. MIN on complex, BAND on float,
// AVG on integers), before anything is sent.
void check_reduce_op(ReduceOp op, ScalarType type);

// In place. Ring reduce-scatter + all-gather for large buffers, a latency-optimal algorithm for small.
void allreduce(Communicator& comm, void* buf, size_t count, ScalarType type, ReduceOp op);
void broadcast(Communicator& comm, void* buf, size_t bytes, int root);
// In place; the result is defined on `root` only (other ranks' buffers may be clobbered).
void reduce(Communicator& comm, void* buf, size_t count, ScalarType type, ReduceOp op, int root);
// out holds size() blocks of `bytes`, rank order.
void allgather(Communicator& comm, const void* in, size_t bytes, void* out);
// Unequal blocks: bytes[r] from rank r, packed in rank order into out.
void allgatherv(Communicator& comm, const void* in, const std::vector<size_t>& bytes, void* out);
void gather(Communicator& comm, const void* in, size_t bytes, void* out, int root);   // out used on root only
void scatter(Communicator& comm, const void* in, void* out, size_t bytes, int root);  // in used on root only
// in holds sum(counts) elements, block r (counts[r] elements) is reduced into rank r's `out`.
void reduce_scatter(Communicator& comm, const void* in, void* out, const std::vector<size_t>& counts,
                    ScalarType type, ReduceOp op);
// Block r of `in` (send_bytes[r]) goes to rank r; block r of `out` (recv_bytes[r]) comes from rank r.
void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes);
void barrier(Communicator& comm);

}  // namespace pride
