#include "backend/liveness/progress_board.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace pride {
namespace {

using Clock = std::chrono::steady_clock;

std::string key_of(int rank) { return "waiting/" + std::to_string(rank); }

// A post is "<sequence> <call>".
std::vector<uint8_t> encode(uint64_t sequence, const std::string& call) {
  const std::string text = std::to_string(sequence) + " " + call;
  return std::vector<uint8_t>(text.begin(), text.end());
}

struct Post {
  bool present = false;
  uint64_t sequence = 0;
  std::string call;
};

Post decode(const std::vector<uint8_t>& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  Post post;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), post.sequence);
  post.present = ec == std::errc();
  if (post.present && end < text.data() + text.size()) post.call = std::string(end + 1, text.data() + text.size());
  return post;
}

// What the reading thread hands back; shared, so that a thread still blocked in the store after the
// reader gave up writes into memory that is still there.
struct Reading {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::vector<Post> posts;
};

std::string list_ranks(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  std::string text = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

ProgressBoard::ProgressBoard(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

std::chrono::milliseconds ProgressBoard::post_after(std::chrono::milliseconds timeout) {
  return std::min(std::chrono::milliseconds(1000), timeout / 4);
}

void ProgressBoard::post_waiting(uint64_t sequence, const std::string& call) {
  // Detached: a store that never answers must not hold up this rank's exit (a joined thread would).
  // The board is a diagnostic: a thread that cannot start, or a store that fails, leaves only the
  // report poorer, never the collective.
  try {
    std::thread([store = store_, key = key_of(rank_), value = encode(sequence, call)] {
      try {
        store->set(key, value);
      } catch (...) {
      }
    }).detach();
  } catch (const std::system_error&) {
  }
}

std::string ProgressBoard::report(uint64_t sequence, const std::string& call, std::chrono::milliseconds patience) {
  auto reading = std::make_shared<Reading>();
  const Clock::time_point until = Clock::now() + patience;
  auto read = [reading, store = store_, rank = rank_, size = size_, sequence, until, mine = encode(sequence, call)] {
    std::vector<Post> posts(static_cast<size_t>(size));
    try {
      store->set(key_of(rank), mine);
      for (;;) {
        bool everyone = true;
        for (int r = 0; r < size; ++r) {
          Post& post = posts[size_t(r)];
          if (r == rank || (post.present && post.sequence == sequence)) continue;
          // check() first: get() on a key nobody posted would wait for the store's own timeout.
          if (store->check({key_of(r)})) post = decode(store->get(key_of(r)));
          everyone = everyone && post.present && post.sequence == sequence;
        }
        if (everyone || Clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (...) {
      // The store failed (its host is gone): report what was read.
    }
    std::lock_guard<std::mutex> lock(reading->mutex);
    reading->posts = std::move(posts);
    reading->done = true;
    reading->done_cv.notify_all();
  };
  try {
    std::thread(std::move(read)).detach();
  } catch (const std::system_error&) {
    return std::string();
  }

  std::unique_lock<std::mutex> lock(reading->mutex);
  // A little past `until`: the reader's last round of the store.
  if (!reading->done_cv.wait_until(lock, until + std::chrono::milliseconds(200), [&] { return reading->done; })) {
    return std::string();
  }
  std::vector<int> absent;
  std::string last_seen;
  for (int r = 0; r < size_; ++r) {
    const Post& post = reading->posts[size_t(r)];
    if (r == rank_ || (post.present && post.sequence == sequence)) continue;
    absent.push_back(r);
    if (post.present) last_seen += fmt::format("; rank {} last waited long in #{} ({})", r, post.sequence, post.call);
  }
  if (absent.empty()) return "; every rank was waiting in this collective";
  return fmt::format("; {} {} not waiting in this collective ({} not called it: hung or busy in other code, or "
                     "skipping it){}",
                     list_ranks(absent), absent.size() == 1 ? "was" : "were", absent.size() == 1 ? "has" : "have",
                     last_seen);
}

}  // namespace pride
