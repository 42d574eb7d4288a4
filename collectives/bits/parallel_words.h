// Running a kernel over the words of a plane with several threads. The packed layout makes this
// simple: word w holds elements [64w, 64w + 64), so disjoint word ranges are independent for every
// kernel of kernels.h that writes planes by word (pack) or elements by word (unpack).
#pragma once

#include <cstddef>
#include <functional>

namespace pride::bits {

// Below this many words per thread (a quarter of a million elements), one thread does it all: the
// threads' start-up would cost more than the work they share.
constexpr size_t kMinWordsPerThread = 4096;

// Calls fn(first_word, nwords) on word ranges that cover [0, nwords) once, in up to `threads` parts
// of whole cache lines (8 words), the calling thread taking the first; returns when all are done and
// rethrows the first exception any part threw. A fork-join per call, not a pool: a pipeline segment's
// kernels take milliseconds, starting a thread tens of microseconds.
void parallel_words(size_t nwords, int threads, const std::function<void(size_t first, size_t count)>& fn);

}  // namespace pride::bits
