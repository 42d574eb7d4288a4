// Peer and chunk arithmetic of the ring algorithms (reduce-scatter then all-gather), pure functions.
//
// Reduce-scatter: at step k (0 <= k < N-1) rank r sends its running partial of chunk (r - k) mod N to
// its right neighbour and receives the partial of chunk (r - k - 1) mod N from its left one, adding
// its own contribution. After N-1 steps rank r holds the complete reduction of chunk (r + 1) mod N.
// All-gather: at step k rank r forwards chunk (r + 1 - k) mod N and receives chunk (r - k) mod N.
#pragma once

namespace pride::patterns {

inline int mod(int a, int n) { return ((a % n) + n) % n; }
inline int ring_right(int rank, int n) { return mod(rank + 1, n); }
inline int ring_left(int rank, int n) { return mod(rank - 1, n); }
inline int ring_rs_send_chunk(int rank, int n, int step) { return mod(rank - step, n); }
inline int ring_rs_recv_chunk(int rank, int n, int step) { return mod(rank - step - 1, n); }
inline int ring_owned_chunk(int rank, int n) { return mod(rank + 1, n); }
inline int ring_ag_send_chunk(int rank, int n, int step) { return mod(rank + 1 - step, n); }
inline int ring_ag_recv_chunk(int rank, int n, int step) { return mod(rank - step, n); }

}  // namespace pride::patterns
