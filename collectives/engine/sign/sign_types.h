// The options of a sign-allreduce (SPEC §2, §4) and their names.
#pragma once

#include <cstdint>
#include <string>

namespace pride {

enum class SignMode : uint8_t { kVote, kMean };        // sign(s) or s / N
enum class VoteKind : uint8_t { kBinary, kTernary };   // x > 0 → +1 else −1; or −1/0/+1 with abstentions
enum class SignAlgorithm : uint8_t { kAuto, kRing, kTree, kDirect, kAllgather, kHier };

const char* name(SignMode mode);
const char* name(VoteKind kind);
const char* name(SignAlgorithm algorithm);
// Parse user strings ("vote", "mean"; "binary", "ternary"; "auto", "ring", ...); InvalidArgument otherwise.
SignMode parse_sign_mode(const std::string& s);
VoteKind parse_vote_kind(const std::string& s);
SignAlgorithm parse_sign_algorithm(const std::string& s);

}  // namespace pride
