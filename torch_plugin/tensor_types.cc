#include "torch_plugin/tensor_types.h"

#include <c10/util/Exception.h>

namespace pride::torch_plugin {

std::ostream& operator<<(std::ostream& out, const CallSite& site) {
  out << site.collective;
  if (site.rank >= 0) out << " (rank " << site.rank << ")";
  return out;
}

ScalarType to_scalar_type(at::ScalarType type, CallSite site) {
  switch (type) {
    case at::kBool: return ScalarType::kBool;
    case at::kByte: return ScalarType::kUInt8;
    case at::kChar: return ScalarType::kInt8;
    case at::kShort: return ScalarType::kInt16;
    case at::kInt: return ScalarType::kInt32;
    case at::kLong: return ScalarType::kInt64;
    case at::kUInt16: return ScalarType::kUInt16;
    case at::kUInt32: return ScalarType::kUInt32;
    case at::kUInt64: return ScalarType::kUInt64;
    case at::kHalf: return ScalarType::kFloat16;
    case at::kBFloat16: return ScalarType::kBFloat16;
    case at::kFloat: return ScalarType::kFloat32;
    case at::kDouble: return ScalarType::kFloat64;
    case at::kComplexFloat: return ScalarType::kComplex64;
    case at::kComplexDouble: return ScalarType::kComplex128;
    case at::kComplexHalf: return ScalarType::kComplex32;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "pride ", site, ": unsupported dtype ", type);
}

void check_movable_dtype(at::ScalarType type, CallSite site) {
  TORCH_CHECK_TYPE(type != at::ScalarType::Undefined && !c10::isQIntType(type) && c10::elementSize(type) > 0,
                   "pride ", site, ": unsupported dtype ", type);
}

bits::DType to_sign_dtype(at::ScalarType type, CallSite site) {
  switch (type) {
    case at::kFloat: return bits::DType::kFloat32;
    case at::kBFloat16: return bits::DType::kBFloat16;
    case at::kHalf: return bits::DType::kFloat16;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "pride ", site, ": expected a float32, bfloat16 or float16 tensor, got ", type);
}

ReduceOp to_reduce_op(const c10d::ReduceOp& op, ScalarType type, CallSite site) {
  ReduceOp mapped;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: mapped = ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: mapped = ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: mapped = ReduceOp::kProduct; break;
    case c10d::ReduceOp::MIN: mapped = ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: mapped = ReduceOp::kMax; break;
    case c10d::ReduceOp::BAND: mapped = ReduceOp::kBand; break;
    case c10d::ReduceOp::BOR: mapped = ReduceOp::kBor; break;
    case c10d::ReduceOp::BXOR: mapped = ReduceOp::kBxor; break;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK_VALUE(false, "pride ", site, ": ReduceOp.PREMUL_SUM is not supported (NCCL's only; Gloo has none "
                        "either): scale the tensor, then SUM");
    default: TORCH_CHECK_VALUE(false, "pride ", site, ": unsupported reduce op ", int(op.op_));
  }
  try {
    check_reduce_op(mapped, type);
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "pride ", site, ": ", e.what());
  }
  return mapped;
}

void check_cpu_tensor(const at::Tensor& t, CallSite site) {
  TORCH_CHECK_VALUE(t.defined(), "pride ", site, ": undefined tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "pride ", site, ": expected a CPU tensor, got one on ", t.device(),
                    " (this build of pride handles CPU tensors; use a \"cpu:pride,cuda:nccl\" group for GPUs)");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "pride ", site, ": expected a dense tensor, got layout ",
                    t.layout());
}

void check_single_tensor(const std::vector<at::Tensor>& tensors, CallSite site) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "pride ", site, ": expected exactly one tensor, got ", tensors.size());
  check_cpu_tensor(tensors[0], site);
}

void check_same_type_and_size(const at::Tensor& reference, const std::vector<at::Tensor>& tensors,
                              CallSite site, const char* what) {
  for (const auto& t : tensors) {
    check_cpu_tensor(t, site);
    TORCH_CHECK_TYPE(t.scalar_type() == reference.scalar_type(), "pride ", site, ": ", what,
                     " tensors must have dtype ", reference.scalar_type(), ", got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.numel() == reference.numel(), "pride ", site, ": ", what, " tensors must have ",
                      reference.numel(), " elements, got ", t.numel());
  }
}

void check_root(int root, int size, CallSite site) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "pride ", site, ": root rank ", root, " is not in [0, ", size, ")");
}

size_t nbytes(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

}  // namespace pride::torch_plugin
