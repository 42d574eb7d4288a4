// PRIDE_HD marks functions compiled for the CPU and, under nvcc, for the GPU too: the CUDA kernels
// share these sources with the CPU kernels, which is what keeps the two bit-identical.
#pragma once

#if defined(__CUDACC__)
#define PRIDE_HD __host__ __device__
#else
#define PRIDE_HD
#endif
