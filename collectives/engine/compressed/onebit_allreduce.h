// The error-compensated 1-bit compressed allreduce of 1-bit Adam and 0/1 Adam (Tang et al. 2021,
// Lu et al. 2023; DeepSpeed's compressed_allreduce), on the direct algorithm's shape:
//
//   1. each rank adds its worker error to x, compresses it to signs × one scale (‖y‖₂/√n, onebit.h)
//      and keeps what that lost as its new worker error;
//   2. all-to-all: rank j owns word chunk j (patterns::chunk, as sign-allreduce's direct algorithm)
//      and receives every rank's signs on it, each with that rank's scale;
//   3. the owner averages the N decompressed chunks, adds its server error, compresses again (signs ×
//      the chunk's own scale) and keeps that loss as its server error;
//   4. all-gather of the owners' signs and scales; every rank writes ±scale_j over chunk j.
//
// Every rank ends with the same float32 values, bit for bit (each chunk is decided once, by its
// owner). Per rank it sends 2(N−1)/N bits per element plus one scale per message: 32× less than a
// float32 ring allreduce.
#pragma once

#include <cstddef>

#include "backend/communicator.h"
#include "collectives/engine/compressed/onebit_ops.h"
#include "collectives/engine/patterns/chunks.h"

namespace pride {

// The elements of a `numel`-element tensor that `rank` of `size` owns: the length of its server error.
patterns::Range onebit_owned_elements(size_t numel, int size, int rank);

// In place on `x` (numel float32). `worker_error` holds numel floats, `server_error` the owned
// elements' count (onebit_owned_elements(numel, size, rank).size); both are read and updated. Start
// both at zero. Errors name the rank and the collective; a size mismatch between ranks is a
// MismatchError on every rank before anything moves.
void onebit_allreduce(Communicator& comm, float* x, float* worker_error, float* server_error, size_t numel);
// The same with no group at all (a world of one): both compressions of x in place, nothing sent.
void onebit_compress_alone(float* x, float* worker_error, float* server_error, size_t numel);
// The same over a tensor and errors that `ops` holds (onebit_ops.h: host memory, or a GPU's).
void onebit_allreduce(Communicator& comm, OnebitOps& ops, size_t numel);

}  // namespace pride
