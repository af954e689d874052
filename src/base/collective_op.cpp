#include "base/collective_op.hpp"

namespace axonml::distributed {

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::Broadcast: return "broadcast";
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::Gather: return "gather";
    case CollectiveOp::Scatter: return "scatter";
    case CollectiveOp::Reduce: return "reduce";
    case CollectiveOp::Barrier: return "barrier";
    case CollectiveOp::NewGroup: return "new_group";
    case CollectiveOp::AllToAll: return "all_to_all";
  }
  return "unknown-collective";
}

}  // namespace axonml::distributed
