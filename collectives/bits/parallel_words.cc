#include "collectives/bits/parallel_words.h"

#include <algorithm>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace pride::bits {

void parallel_words(size_t nwords, int threads, const std::function<void(size_t first, size_t count)>& fn) {
  const size_t parts = std::max<size_t>(1, std::min<size_t>(size_t(std::max(threads, 1)), nwords / kMinWordsPerThread));
  if (parts == 1) {
    if (nwords > 0) fn(0, nwords);
    return;
  }
  constexpr size_t kLine = 8;  // words per 64-byte cache line: parts never share one
  const size_t per_part = (nwords / parts + kLine - 1) / kLine * kLine;
  std::vector<std::exception_ptr> errors(parts);
  auto run_part = [&](size_t k) {
    const size_t first = std::min(nwords, k * per_part), last = k + 1 == parts ? nwords : std::min(nwords, first + per_part);
    try {
      if (last > first) fn(first, last - first);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(parts - 1);
  for (size_t k = 1; k < parts; ++k) {
    try {
      helpers.emplace_back(run_part, k);
    } catch (const std::system_error&) {  // no thread to be had: this one does that part too
      run_part(k);
    }
  }
  run_part(0);
  for (auto& t : helpers) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace pride::bits
