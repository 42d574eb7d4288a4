#include "collectives/engine/sign/selector.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/common/settings.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/tree.h"

namespace pride {

LinkModel LinkModel::for_group(int num_nodes, double ranks_per_core) {
  // Defaults measured loosely on this project's machines: UCX shared memory between processes on one
  // host, and TCP over Ethernet between hosts. Overrides let a cluster describe its real links.
  LinkModel m = num_nodes <= 1 ? LinkModel{3.0, 1.0, 4000.0} : LinkModel{40.0, 5.0, 1250.0};
  if (ranks_per_core > 1.0) {
    m.overhead_us += 20.0 * (ranks_per_core - 1.0);  // a waiting rank must be scheduled to answer
    if (num_nodes <= 1) m.bytes_per_us /= ranks_per_core;
  }
  const Settings& s = Settings::get();
  if (s.link_latency_us > 0) m.latency_us = s.link_latency_us;
  if (s.link_bandwidth_gbps > 0) m.bytes_per_us = s.link_bandwidth_gbps * 1e3 / 8;
  return m;
}

double node_count_bits(const SignPlan& plan, int local_size) {
  return plan.packed_node_counts ? bits::counts::bits_per_element(bits::counts::make_code(uint32_t(local_size) + 1))
                                 : double(bits::planes_for(local_size));
}

double hier_inter_node_bits(const SignPlan& plan, int num_nodes, int local_size) {
  const double M = std::max(1, num_nodes);
  return (plan.counters * node_count_bits(plan, local_size) + plan.result_wire_bits()) * (M - 1) / M;
}

double wire_bits_per_element(SignAlgorithm algorithm, const SignPlan& plan, int num_nodes) {
  const double n = plan.nranks, C = plan.counters, R = plan.result_planes;
  if (plan.nranks == 1) return 0;
  switch (algorithm) {
    case SignAlgorithm::kHier: {
      // Leader scheme: non-leaders send their votes; each leader its count shards and result chunks to
      // the other leaders, and the result to its node's L − 1 other ranks. Rails send the same bytes
      // per node, every rank an equal share: this average is each rank's figure there.
      const int M = std::clamp(num_nodes, 1, plan.nranks);
      const int L = std::max(1, plan.nranks / M);
      return ((n - M) * C + M * (hier_inter_node_bits(plan, M, L) + R * (L - 1))) / n;  // R: planes inside nodes
    }
    case SignAlgorithm::kRing: {
      double reduce = 0;  // step k forwards a partial of k votes: planes_for(k) planes of 1/N of the tensor
      for (int k = 1; k < plan.nranks; ++k) reduce += C * bits::planes_for(k) / n;
      return reduce + R * (n - 1) / n;
    }
    case SignAlgorithm::kDirect:
      return (C + plan.result_wire_bits()) * (n - 1) / n;
    case SignAlgorithm::kAllgather:
      return C * (n - 1);
    case SignAlgorithm::kTree:  // averaged over ranks: each non-root sends its subtree count up once
    case SignAlgorithm::kAuto: {
      double up = 0, down = 0;
      for (int r = 0; r < plan.nranks; ++r) {
        if (r > 0) up += C * bits::planes_for(patterns::tree_subtree_size(r, plan.nranks));
        for (int w = 0; w < 2; ++w) down += patterns::tree_child(r, plan.nranks, w) >= 0 ? R : 0;
      }
      return (up + down) / n;
    }
  }
  return 0;
}

double estimate_us(SignAlgorithm algorithm, const SignPlan& plan, size_t numel, const LinkModel& link,
                   int num_nodes) {
  const int n = plan.nranks;
  // L ranks per node share its link: a flat algorithm's bytes cross it L times over.
  const int nodes = std::clamp(num_nodes, 1, n);
  const int local = std::max(1, n / nodes);
  const double bytes = wire_bits_per_element(algorithm, plan) * double(numel) / 8 * (nodes > 1 ? local : 1);
  switch (algorithm) {
    case SignAlgorithm::kHier: {
      if (nodes == 1 || local == 1) return std::numeric_limits<double>::infinity();  // nothing to gain
      const double inter = hier_inter_node_bits(plan, nodes, local) * double(numel) / 8;
      return 4 * link.latency_us + 2.0 * (nodes - 1 + local - 1) * link.overhead_us + inter / link.bytes_per_us;
    }
    case SignAlgorithm::kRing:
      return 2.0 * (n - 1) * (link.latency_us + link.overhead_us) + bytes / link.bytes_per_us;
    case SignAlgorithm::kDirect:
      return 2 * link.latency_us + 2.0 * (n - 1) * link.overhead_us + bytes / link.bytes_per_us;
    case SignAlgorithm::kAllgather:
      return link.latency_us + (n - 1) * link.overhead_us + bytes / link.bytes_per_us;
    case SignAlgorithm::kTree: {
      // The critical path: each level receives two children's counts, then the result comes down.
      const int depth = patterns::tree_depth(n);
      const double level_bytes = double(numel) / 8 * (2.0 * plan.counters * bits::planes_for(n) + plan.result_planes);
      return 2.0 * depth * (link.latency_us + 2 * link.overhead_us) + depth * level_bytes / link.bytes_per_us;
    }
    case SignAlgorithm::kAuto:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

ResultCoding select_result_coding(const SignPlan& plan, SignAlgorithm algorithm, size_t numel, int num_nodes,
                                  double ranks_per_core) {
  // The algorithms that all-gather result chunks: the direct one among all ranks, hier among nodes.
  const bool direct = algorithm == SignAlgorithm::kDirect, hier = algorithm == SignAlgorithm::kHier;
  if (!(direct || hier) || plan.nranks == 1) return ResultCoding::kPlanes;
  // The one coding this result can take, and its CPU cost.
  SignPlan coded = plan;
  double ns_per_element = 0;
  if (plan.has_tie_plane()) {
    coded.result_coding = ResultCoding::kTrits;
    ns_per_element = kTritCodingNsPerElement;
  } else if (plan.mode == SignMode::kMean) {
    coded.result_coding = ResultCoding::kCounts;
    ns_per_element = kCountCodingNsPerElement;
  } else {
    return ResultCoding::kPlanes;  // a binary vote of odd N: one plane, nothing to pack
  }
  const double saved_bits = plan.result_planes - coded.result_wire_bits();
  if (saved_bits <= 0) return ResultCoding::kPlanes;  // a base that packs no better than its planes
  const std::string& setting = Settings::get().result_coding;
  const char* coding_name = coded.result_coding == ResultCoding::kTrits ? "trits" : "counts";
  if (setting == "packed" || setting == coding_name) return coded.result_coding;
  if (setting != "auto") return ResultCoding::kPlanes;  // planes, or the other coding's name
  const LinkModel link = LinkModel::for_group(num_nodes, ranks_per_core);
  // The share of the tensor that crosses a link coded: (N − 1)/N of it for direct, (M − 1)/M per node
  // for hier.
  const int nodes = std::clamp(num_nodes, 1, plan.nranks);
  const double parts = direct ? plan.nranks : nodes;
  // A flat algorithm's bytes cross a node's link once per rank of the node (as estimate_us counts them).
  const double link_sharers = direct && nodes > 1 ? double(plan.nranks / nodes) : 1.0;
  const double saved_us =
      double(numel) * saved_bits / 8 * (parts - 1) / parts * link_sharers / link.bytes_per_us;
  // Each rank codes (encodes its chunk, decodes the others') the whole tensor in direct, its node's
  // part of it on hier's rails, where a node's L ranks share the work (uneven nodes' leaders code more:
  // the model undercharges them).
  const double coded_share = hier ? parts / plan.nranks : 1.0;
  const double coding_us = double(numel) * coded_share * ns_per_element * ranks_per_core / 1000;
  return coding_pays(saved_us, coding_us) ? coded.result_coding : ResultCoding::kPlanes;
}

bool select_packed_node_counts(const SignPlan& plan, SignAlgorithm algorithm, size_t numel, int num_nodes,
                               double ranks_per_core) {
  const int nodes = std::clamp(num_nodes, 1, plan.nranks), local = plan.nranks / nodes;
  if (algorithm != SignAlgorithm::kHier || nodes < 2 || local < 2) return false;
  SignPlan packed = plan;
  packed.packed_node_counts = true;
  const double saved_bits = plan.counters * (bits::planes_for(local) - node_count_bits(packed, local));
  if (saved_bits <= 0) return false;  // L + 1 a power of two
  const std::string& setting = Settings::get().result_coding;
  if (setting != "auto") return setting == "counts" || setting == "packed";
  const LinkModel link = LinkModel::for_group(num_nodes, ranks_per_core);
  const double saved_us = double(numel) * saved_bits / 8 * (nodes - 1) / nodes / link.bytes_per_us;
  // Each rank of a node encodes its part (1/L of the tensor) of the node's count for the M − 1 other
  // nodes' pieces, and decodes theirs on its own piece: (M − 1)/M of its part each way, every counter.
  const double coded_elements = double(numel) / local * plan.counters * (nodes - 1) / nodes;
  const double coding_us =
      coded_elements * kCountCodingNsPerBit * std::log2(double(local) + 1) * ranks_per_core / 1000;
  return coding_pays(saved_us, coding_us);
}

SignAlgorithm select_sign_algorithm(const SignPlan& plan, size_t numel, int num_nodes, double ranks_per_core) {
  SignAlgorithm forced = parse_sign_algorithm(Settings::get().algo);
  if (forced != SignAlgorithm::kAuto) return forced;
  if (plan.nranks == 1) return SignAlgorithm::kDirect;
  const LinkModel link = LinkModel::for_group(num_nodes, ranks_per_core);
  SignAlgorithm best = SignAlgorithm::kDirect;
  double best_us = std::numeric_limits<double>::infinity();
  for (auto a : {SignAlgorithm::kDirect, SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kAllgather,
                 SignAlgorithm::kHier}) {
    // The direct algorithm at the wire cost of the coding it would take (a mean of N = 4 sends 2.6 bits
    // per element as packed counts, 3 as planes: the all-gather's 3 would tie with it otherwise).
    SignPlan coded = plan;
    coded.result_coding = select_result_coding(plan, a, numel, num_nodes, ranks_per_core);
    coded.packed_node_counts = select_packed_node_counts(plan, a, numel, num_nodes, ranks_per_core);
    const double t = estimate_us(a, coded, numel, link, num_nodes);
    if (t < best_us) {
      best = a;
      best_us = t;
    }
  }
  return best;
}

}  // namespace pride
