// Binary votes with a few elements re-voted as ternary ones, for votes and result planes that live on a
// GPU: sign_allreduce_revoting's twin (collectives/engine/sign/sparse_abstentions.h) for DistributedLion's
// CUDA step, the same bits. The bucket's binary exchange and count go by vote_on_device's transport and
// data path; the few bits at the re-voted elements U are gathered on the device, counted through the host
// (an all-gather of 2 bits an element of U, as on the CPU), and written back into the result planes on
// the device, with the known zero counts of the elements where every rank abstains (E).
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <cstdint>
#include <vector>

#include "torch_plugin/device_vote.h"

namespace pride::torch_plugin {

// where.votes: the ternary planes (+1, then −1, words_for(numel) words each), complete (the caller has
// waited for them on the host); where.planes: room for the ternary plan's result planes. `side`: a stream
// of where.device for the gather of the bits at U and their copy to the host, which this waits for: one
// with nothing else queued, so that the wait is not behind earlier work on where.stream. `options.votes`
// is ignored: the result is the ternary one, in its encoding (the returned plan). revote and
// abstain_everywhere: as sign_allreduce_revoting's, the same on every rank. Returns as vote_on_device does
// (with where.written recorded after the last work that writes the planes, or once they are written).
SignPlan revote_on_device(Communicator& comm, NcclGroup* nccl, size_t numel, SignOptions options, uint32_t dtype_code,
                          const DeviceVote& where, cudaStream_t side, const std::vector<uint32_t>& revote,
                          const std::vector<uint32_t>& abstain_everywhere);

}  // namespace pride::torch_plugin
