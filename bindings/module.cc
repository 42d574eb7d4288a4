// pride._C: creates the c10d backend and reaches pride's own operations on a group's backend.
// Kept thin: argument parsing and GIL handling only; everything else lives in torch_plugin/.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "backend/topology/host_topology.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/compressed/onebit_allreduce.h"
#include "torch_plugin/distributed_lion.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/compressed_adam_steps.h"
#include "torch_plugin/lion_cub_steps.h"
#ifdef PRIDE_WITH_CUDA_TENSORS
#include "torch_plugin/distributed_lion_cuda.h"
#endif

namespace py = pybind11;
using pride::torch_plugin::PrideBackend;

namespace {

PrideBackend& as_pride(c10d::Backend& backend) {
  auto* pride = dynamic_cast<PrideBackend*>(&backend);
  if (pride == nullptr) {
    throw py::type_error("pride: this process group's CPU backend is \"" + backend.getBackendName() +
                         "\", not \"pride\"; create the group with backend=\"pride\" (or \"cpu:pride,cuda:nccl\")");
  }
  return *pride;
}

// A bad mode, vote kind or algorithm, in the message form of every other error: the collective and the rank.
pride::SignOptions sign_options(const std::string& mode, const std::string& votes, const std::string& algorithm,
                                const char* collective, int rank) {
  try {
    return {pride::parse_sign_mode(mode), pride::parse_vote_kind(votes), pride::parse_sign_algorithm(algorithm)};
  } catch (const std::exception& e) {
    throw py::value_error("pride " + std::string(collective) + " (rank " + std::to_string(rank) + "): " + e.what());
  }
}

py::dict traffic_dict(const std::map<std::string, pride::TrafficCounters>& traffic) {
  py::dict out;
  for (const auto& [name, t] : traffic) {
    py::dict d;
    d["calls"] = t.calls;
    d["bytes_sent"] = t.bytes_sent;
    d["bytes_received"] = t.bytes_received;
    d["device_bytes_sent"] = t.device_bytes_sent;
    out[py::str(name)] = d;
  }
  return out;
}

}  // namespace

using pride::torch_plugin::MaybeTensors;
using pride::torch_plugin::Tensors;

PYBIND11_MODULE(_C, m) {
  m.doc() = "pride's C++ core: the c10d backend and the sign-allreduce engine";

  m.def("create_backend", &pride::torch_plugin::create_backend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "Creates pride's c10d backend (the creator registered with torch.distributed).");

  m.def(
      "sign_allreduce",
      [](c10d::Backend& backend, at::Tensor tensor, const std::string& mode, const std::string& votes,
         const std::string& algorithm) {
        PrideBackend& pride = as_pride(backend);
        auto options = sign_options(mode, votes, algorithm, "sign_allreduce", pride.getRank());
        return pride.sign_allreduce(tensor, options);
      },
      py::arg("backend"), py::arg("tensor"), py::arg("mode"), py::arg("votes"), py::arg("algorithm") = "auto");

  m.def(
      "sign_allreduce_packed",
      [](c10d::Backend& backend, const at::Tensor& packed, int64_t numel, const std::string& mode,
         const std::string& algorithm) {
        PrideBackend& pride = as_pride(backend);
        auto options = sign_options(mode, "binary", algorithm, "sign_allreduce_packed", pride.getRank());
        return pride.sign_allreduce_packed(packed, numel, options);
      },
      py::arg("backend"), py::arg("packed"), py::arg("numel"), py::arg("mode"), py::arg("algorithm") = "auto");

  m.def(
      "compressed_allreduce",
      [](c10d::Backend& backend, at::Tensor tensor, at::Tensor worker_error, at::Tensor server_error) {
        return as_pride(backend).compressed_allreduce(tensor, worker_error, server_error);
      },
      py::arg("backend"), py::arg("tensor"), py::arg("worker_error"), py::arg("server_error"));
  m.def(
      "level_vote",
      [](c10d::Backend& backend, at::Tensor q, int64_t max_level) {
        return as_pride(backend).level_vote(q, max_level);
      },
      py::arg("backend"), py::arg("q"), py::arg("max_level"));
  m.def(
      "compressed_allreduce_alone",
      [](at::Tensor tensor, at::Tensor worker_error, at::Tensor server_error) {
        for (const at::Tensor* t : {&tensor, &worker_error, &server_error}) {
          TORCH_CHECK_VALUE(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous() &&
                                t->numel() == tensor.numel(),
                            "pride compressed_allreduce_alone: contiguous float32 CPU tensors of one size");
        }
        py::gil_scoped_release release;
        pride::onebit_compress_alone(tensor.data_ptr<float>(), worker_error.data_ptr<float>(),
                                     server_error.data_ptr<float>(), size_t(tensor.numel()));
      },
      py::arg("tensor"), py::arg("worker_error"), py::arg("server_error"),
      "The compressed allreduce of a world of one (no process group): both compressions in place.");
  m.def(
      "compressed_allreduce_server_numel",
      [](int64_t numel, int size, int rank) {
        TORCH_CHECK_VALUE(numel >= 0 && size > 0 && rank >= 0 && rank < size, "pride: invalid numel/size/rank");
        return int64_t(pride::onebit_owned_elements(size_t(numel), size, rank).size);
      },
      py::arg("numel"), py::arg("size"), py::arg("rank"));

#ifdef PRIDE_WITH_CUDA_TENSORS
  py::class_<pride::torch_plugin::CudaLionWorkspace, std::shared_ptr<pride::torch_plugin::CudaLionWorkspace>>(
      m, "CudaLionWorkspace", "Device and pinned buffers a DistributedLion reuses across steps (one per device and dtype)")
      .def(py::init<>())
      .def_property_readonly("device_bytes", &pride::torch_plugin::CudaLionWorkspace::device_bytes);
#endif
  py::class_<pride::torch_plugin::AbstentionMemory, std::shared_ptr<pride::torch_plugin::AbstentionMemory>>(
      m, "AbstentionMemory",
      "What DistributedLion's exact votes remember between steps (one per param group, device and dtype): each "
      "bucket's union of abstaining elements, re-voted while it holds every rank's abstentions")
      .def(py::init<>())
      .def_property_readonly("remembered", [](const pride::torch_plugin::AbstentionMemory& m) {
        std::vector<size_t> sizes;  // elements of each bucket's remembered union
        for (const auto& b : m.buckets) sizes.push_back(b.elements.size());
        return sizes;
      })
      .def_property_readonly("everywhere", [](const pride::torch_plugin::AbstentionMemory& m) {
        std::vector<size_t> sizes;  // elements of each bucket's union known to abstain on every rank
        for (const auto& b : m.buckets) sizes.push_back(b.everywhere.size());
        return sizes;
      });
  m.def("cuda_supported", &PrideBackend::cuda_supported, "Whether this build of pride handles CUDA tensors.");
  m.def("nccl_supported", &PrideBackend::nccl_supported,
        "Whether this build of pride has the NCCL transport for CUDA tensors (PRIDE_CUDA_TRANSPORT).");

  m.def(
      "distributed_lion_step",
      [](py::object backend, const std::vector<at::Tensor>& params,
         const std::vector<std::optional<at::Tensor>>& maybe_grads,
         const std::vector<std::optional<at::Tensor>>& maybe_momenta, double lr, double beta1, double beta2,
         double weight_decay, const std::string& mode, const std::string& votes, int64_t bucket_elements,
         uint64_t layout_digest, py::object workspace, int rank, py::object memory_object) {
        PrideBackend* pride = backend.is_none() ? nullptr : &as_pride(backend.cast<c10d::Backend&>());
        // Without a backend (no group, or G-Lion's local step on averaged gradients): the caller's rank.
        const pride::torch_plugin::CallSite site{"DistributedLion", pride != nullptr ? pride->getRank() : rank};
        const auto options = sign_options(mode, "binary", "auto", "DistributedLion", site.rank);  // votes: below
        const auto lion_votes = pride::torch_plugin::parse_lion_votes(votes);
        TORCH_CHECK_VALUE(bucket_elements > 0, "pride ", site, ": bucket size must be positive");
        const pride::torch_plugin::LionHyper hyper{lr, beta1, beta2, weight_decay};
        // None (no gradient on this rank) becomes an undefined tensor: it abstains.
        auto defined_or_empty = [](const std::vector<std::optional<at::Tensor>>& in) {
          std::vector<at::Tensor> out;
          for (const auto& t : in) out.push_back(t.value_or(at::Tensor()));
          return out;
        };
        const std::vector<at::Tensor> grads = defined_or_empty(maybe_grads), momenta = defined_or_empty(maybe_momenta);
        auto memory = memory_object.is_none()
                          ? nullptr
                          : memory_object.cast<std::shared_ptr<pride::torch_plugin::AbstentionMemory>>();
        if (!params.empty() && params[0].is_cuda()) {
#ifdef PRIDE_WITH_CUDA_TENSORS
          auto ws = workspace.is_none() ? std::make_shared<pride::torch_plugin::CudaLionWorkspace>()
                                        : workspace.cast<std::shared_ptr<pride::torch_plugin::CudaLionWorkspace>>();
          py::gil_scoped_release release;
          return pride::torch_plugin::distributed_lion_step_cuda(pride, *ws, params, grads, momenta, hyper, options,
                                                                 lion_votes, size_t(bucket_elements), layout_digest,
                                                                 site, memory.get());
#else
          TORCH_CHECK_VALUE(false, "pride ", site, ": parameters on ", params[0].device(),
                            ", but this build of pride has no CUDA support");
#endif
        }
        if (memory == nullptr && !workspace.is_none()) {  // a CPU step's workspace is its memory
          memory = workspace.cast<std::shared_ptr<pride::torch_plugin::AbstentionMemory>>();
        }
        py::gil_scoped_release release;  // packing, communication and apply all run without the GIL
        return pride::torch_plugin::distributed_lion_step(pride, params, grads, momenta, hyper, options, lion_votes,
                                                          size_t(bucket_elements), layout_digest, site, memory.get());
      },
      py::arg("backend"), py::arg("params"), py::arg("grads"), py::arg("momenta"), py::arg("lr"), py::arg("beta1"),
      py::arg("beta2"), py::arg("weight_decay"), py::arg("mode"), py::arg("votes"), py::arg("bucket_elements"),
      py::arg("layout_digest") = 0, py::arg("workspace") = py::none(), py::arg("rank") = 0,
      py::arg("memory") = py::none(),
      "One fused Distributed Lion step over tensors of one dtype and device (backend None: a world of one). "
      "grads/momenta entries may be None (no gradient on this rank: it abstains). workspace: a CudaLionWorkspace "
      "for CUDA tensors, an AbstentionMemory (or None) for CPU ones. memory: the exact votes' AbstentionMemory "
      "of this param group, device and dtype (None: nothing remembered; on CPU, the workspace's). Returns False, having "
      "applied nothing, when the ranks' layout digests differ. rank: the one errors name without a backend.");

  // 1-bit Adam's and 0/1 Adam's fused CPU steps (collectives/bits/compressed_adam.h).
  m.def("compressed_adam_fused_supported", &pride::torch_plugin::compressed_adam_fused_supported, py::arg("params"),
        py::arg("grads"), py::arg("states"),
        "Whether the compressed Adam optimizers' fused steps take these tensors: one device (CPU, or CUDA in a "
        "CUDA build), contiguous, one float dtype for parameters and gradients (or None), and each list of "
        "`states` float32 of the parameters' sizes.");
  m.def(
      "zero_one_adam_local_step",
      [](const Tensors& params, const MaybeTensors& grads, const Tensors& momenta, const Tensors& variances,
         const Tensors& accumulators, const std::optional<at::Tensor>& scaled, double lr, double beta1, double eps,
         double weight_decay, double step_size, double bias_correction2_sqrt, bool bias_correction) {
        const pride::bits::AdamLocalStep step{lr, beta1, eps, weight_decay, step_size, bias_correction2_sqrt,
                                              bias_correction};
        py::gil_scoped_release release;
        pride::torch_plugin::zero_one_adam_local_step(params, grads, momenta, variances, accumulators, scaled, step);
      },
      py::arg("params"), py::arg("grads"), py::arg("momenta"), py::arg("variances"), py::arg("accumulators"),
      py::arg("scaled"), py::arg("lr"), py::arg("beta1"), py::arg("eps"), py::arg("weight_decay"),
      py::arg("step_size"), py::arg("bias_correction2_sqrt"), py::arg("bias_correction"),
      "0/1 Adam's local step after the variance froze; with `scaled` (the group's flat float32 buffer) a "
      "synchronisation's first half.");
  m.def(
      "zero_one_adam_sync",
      [](const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
         const Tensors& accumulators, const Tensors& anchors, double eps, double lr_sum, bool mask_zero_variance) {
        const pride::bits::AdamSync sync{eps, lr_sum, mask_zero_variance};
        py::gil_scoped_release release;
        pride::torch_plugin::zero_one_adam_sync(mean, params, momenta, variances, accumulators, anchors, sync);
      },
      py::arg("mean"), py::arg("params"), py::arg("momenta"), py::arg("variances"), py::arg("accumulators"),
      py::arg("anchors"), py::arg("eps"), py::arg("lr_sum"), py::arg("mask_zero_variance"),
      "0/1 Adam's synchronisation from the compressed allreduce's mean: momenta, anchors, parameters.");
  m.def(
      "onebit_adam_momentum",
      [](const Tensors& params, const MaybeTensors& grads, const Tensors& momenta, const at::Tensor& out,
         double beta1) {
        py::gil_scoped_release release;
        pride::torch_plugin::onebit_adam_momentum(params, grads, momenta, out, beta1);
      },
      py::arg("params"), py::arg("grads"), py::arg("momenta"), py::arg("out"), py::arg("beta1"),
      "1-bit Adam's compressed step, first half: the momenta, also into the group's flat buffer `out`.");
  m.def(
      "onebit_adam_apply",
      [](const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances, double lr,
         double eps, double weight_decay, double step_size, double bias_correction2_sqrt, bool bias_correction,
         bool mask_zero_variance) {
        const pride::bits::AdamApply apply{lr, eps, weight_decay, step_size, bias_correction2_sqrt, bias_correction,
                                           mask_zero_variance};
        py::gil_scoped_release release;
        pride::torch_plugin::onebit_adam_apply(mean, params, momenta, variances, apply);
      },
      py::arg("mean"), py::arg("params"), py::arg("momenta"), py::arg("variances"), py::arg("lr"), py::arg("eps"),
      py::arg("weight_decay"), py::arg("step_size"), py::arg("bias_correction2_sqrt"), py::arg("bias_correction"),
      py::arg("mask_zero_variance"),
      "1-bit Adam's compressed step, second half, from the compressed allreduce's mean: momenta and parameters.");

  // Lion Cub's fused CPU passes (collectives/bits/lion_cub.h), one parameter at a time.
  m.def("lion_cub_fused_supported", &pride::torch_plugin::lion_cub_fused_supported, py::arg("param"), py::arg("grad"),
        py::arg("momentum"),
        "Whether Lion Cub's fused passes take these tensors: CPU, contiguous, float32 or bfloat16, one size.");
  m.def(
      "lion_cub_interpolate",
      [](const at::Tensor& grad, const at::Tensor& momentum, double beta1, double beta2, const at::Tensor& c) {
        py::gil_scoped_release release;
        return pride::torch_plugin::lion_cub_interpolate(grad, momentum, beta1, beta2, c);
      },
      py::arg("grad"), py::arg("momentum"), py::arg("beta1"), py::arg("beta2"), py::arg("c"),
      "c (float32) <- b1*m + (1-b1)*g with NaN made 0, m <- b2*m + (1-b2)*g; returns (sum |c| in double, max |c|).");
  m.def(
      "lion_cub_signs",
      [](const at::Tensor& c, const at::Tensor& q) {
        py::gil_scoped_release release;
        pride::torch_plugin::lion_cub_signs(c, q);
      },
      py::arg("c"), py::arg("q"), "q (int8) <- sign(c).");
  m.def(
      "lion_cub_levels",
      [](const at::Tensor& c, const at::Tensor& q, double scale, int64_t max_level) {
        py::gil_scoped_release release;
        pride::torch_plugin::lion_cub_levels(c, q, scale, max_level);
      },
      py::arg("c"), py::arg("q"), py::arg("scale"), py::arg("max_level"),
      "q (int8) <- clamp(round(c / scale * max_level / 2), -max_level, max_level), in float32.");
  m.def(
      "lion_cub_apply_sign",
      [](const at::Tensor& param, const at::Tensor& total, double lr, double weight_decay) {
        py::gil_scoped_release release;
        pride::torch_plugin::lion_cub_apply_sign(param, total, lr, weight_decay);
      },
      py::arg("param"), py::arg("total"), py::arg("lr"), py::arg("weight_decay"),
      "param <- param * (1 - lr * weight_decay) - lr * sign(total), total the ranks' int8 sums.");

  m.def("is_pride_backend", [](c10d::Backend& backend) { return dynamic_cast<PrideBackend*>(&backend) != nullptr; });
  m.def("traffic", [](c10d::Backend& backend) { return traffic_dict(as_pride(backend).traffic()); });
  m.def("reset_traffic", [](c10d::Backend& backend) { as_pride(backend).reset_traffic(); });
  m.def("fingerprint_checks",
        [](c10d::Backend& backend) { return as_pride(backend).communicator().fingerprint_checks(); });
  m.def("topology", [](c10d::Backend& backend) {
    const pride::Communicator& comm = as_pride(backend).communicator();
    py::dict d;
    d["local_rank"] = comm.local_rank();
    d["local_size"] = comm.local_size();
    d["num_nodes"] = comm.num_nodes();
    d["ranks_per_core"] = comm.ranks_per_core();
    d["host"] = pride::host_topology().describe();
    // How this rank reaches each peer: UCX's transports, and whether sends skip the rendezvous.
    py::list peers;
    for (int p = 0; p < comm.size(); ++p) {
      if (p == comm.rank()) continue;
      py::dict peer;
      peer["rank"] = p;
      peer["route"] = comm.transport().route(p);
      peer["eager"] = comm.transport().sends_eagerly_to(p);
      peers.append(peer);
    }
    d["peers"] = peers;
    return d;
  });
  m.def("kernel_isa", [] { return std::string(pride::bits::isa_name(pride::bits::active_isa())); });
}
