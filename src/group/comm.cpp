#include "axonml/distributed/comm.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/flat.hpp"
#include "group/shape_agreement.hpp"

namespace axonml::distributed {

void all_reduce_sum(Tensor& t, const ProcessGroup& pg) { pg.all_reduce_tensor(t, ReduceOp::Sum); }
void all_reduce_mean(Tensor& t, const ProcessGroup& pg) { pg.all_reduce_tensor(t, ReduceOp::Average); }
void all_reduce_min(Tensor& t, const ProcessGroup& pg) { pg.all_reduce_tensor(t, ReduceOp::Min); }
void all_reduce_max(Tensor& t, const ProcessGroup& pg) { pg.all_reduce_tensor(t, ReduceOp::Max); }
void all_reduce_product(Tensor& t, const ProcessGroup& pg) { pg.all_reduce_tensor(t, ReduceOp::Product); }

void broadcast(Tensor& t, const ProcessGroup& pg) { pg.broadcast_tensor(t, 0); }
void broadcast_from(Tensor& t, int src, const ProcessGroup& pg) { pg.broadcast_tensor(t, src); }

Tensor all_gather(const Tensor& t, const ProcessGroup& pg) { return pg.all_gather_tensor(t); }
Tensor reduce_scatter_sum(const Tensor& t, const ProcessGroup& pg) {
  return pg.reduce_scatter_tensor(t, ReduceOp::Sum);
}
Tensor reduce_scatter_mean(const Tensor& t, const ProcessGroup& pg) {
  return pg.reduce_scatter_tensor(t, ReduceOp::Average);
}

void barrier(const ProcessGroup& pg) { pg.barrier(); }
bool is_main_process(const ProcessGroup& pg) { return pg.rank() == 0; }
int world_size(const ProcessGroup& pg) { return pg.size(); }
int rank(const ProcessGroup& pg) { return pg.rank(); }

namespace {

// Named for the op, where pg.backend() would say "backend".
void require_member(const char* op, const ProcessGroup& pg) { pg.member_backend(op); }

void check_split(const char* op, const Tensor& t, std::size_t dim, const ProcessGroup& pg) {
  if (dim >= t.dim()) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(pg.rank()) + ": dim " +
                          std::to_string(dim) + " is out of range for shape " + to_string(t.shape()));
  }
  const auto n = static_cast<std::size_t>(pg.size());
  if (t.shape()[dim] % n != 0) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(pg.rank()) + ": dim " +
                          std::to_string(dim) + " of shape " + to_string(t.shape()) + " (size " +
                          std::to_string(t.shape()[dim]) + ") does not split evenly into " +
                          std::to_string(n) + " ranks");
  }
}

// Why: the results of scatter_tensor and gather_tensor take their shape
// from every rank's arguments, and sync_gradients its layout, but their data
// collective compares only element counts. Ranks that passed the same count
// in other shapes, another dim, or another split of a gradient list got
// results of different shapes, or rank 0's data cut the wrong way, silently
// (found by a review). Every rank sees every rank's arguments and throws the
// same CollectiveMismatch, naming rank 0's and the first that differ.
// `dim`: the split / concatenation dim, -1 for none.
void check_ranks_agree(const char* op, const std::vector<Shape>& shapes, std::int64_t dim, const ProcessGroup& pg,
                       const std::string& own_detail = "") {
  if (pg.size() == 1) return;
  const auto differ = find_shape_disagreement(shapes, dim, pg, "(none)");
  if (!differ) return;
  const std::string head = std::string(op) + " on rank " + std::to_string(pg.rank()) + ": the ranks' arguments differ: ";
  const std::string r = "rank " + std::to_string(differ->rank);
  auto along = [&](std::int64_t d) { return dim < 0 ? std::string() : " along dim " + std::to_string(d); };
  if (dim >= 0) {  // one tensor
    const std::string rank0_shape = differ->index == ShapeDisagreement::kOnlyExtra ? to_string(shapes[0]) : differ->rank0_shape;
    const std::string other_shape = differ->index == ShapeDisagreement::kOnlyExtra ? to_string(shapes[0]) : differ->other_shape;
    throw CollectiveMismatch(head + "rank 0 passes shape " + rank0_shape + along(differ->rank0_extra) + ", " + r +
                             " passes shape " + other_shape + along(differ->other_extra) +
                             "; every rank must pass the same shapes");
  }
  const std::string where = differ->index == ShapeDisagreement::kOnlyExtra
                                ? "the shapes differ"
                                : "tensor " + std::to_string(differ->index) + " has shape " + differ->rank0_shape +
                                      " on rank 0 but " + differ->other_shape + " on " + r;
  throw CollectiveMismatch(head + where + " (tensor counts: rank 0 has " + std::to_string(differ->rank0_count) +
                           ", " + r + " has " + std::to_string(differ->other_count) +
                           "); every rank must pass the same shapes" + own_detail);
}

std::string shapes_of(const std::vector<Tensor>& tensors) {
  std::string s;
  for (const Tensor& t : tensors) s += (s.empty() ? "" : ", ") + to_string(t.shape());
  return s;
}

}  // namespace

// Rank 0 lays its chunks out one after another (chunk r is narrow(dim, r*c, c),
// made contiguous), so a plain scatter hands each rank its own.
//
// The ranks' shapes and dims are compared first, and only then checked one
// rank at a time: a rank whose dim does not split evenly used to throw alone
// while the others entered the comparison, and their calls fell out of step
// for good (found by a review). Agreed, the checks fail on every rank alike.
Tensor scatter_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg) {
  require_member("scatter_tensor", pg);
  check_ranks_agree("scatter_tensor", {tensor.shape()}, static_cast<std::int64_t>(dim), pg);
  check_split("scatter_tensor", tensor, dim, pg);
  const auto n = static_cast<std::size_t>(pg.size());
  const std::size_t chunk = tensor.shape()[dim] / n;
  Shape chunk_shape = tensor.shape();
  chunk_shape[dim] = chunk;
  Tensor out = Tensor::zeros(chunk_shape);
  std::vector<float> send;
  if (pg.rank() == 0) {
    send.reserve(tensor.numel());
    for (std::size_t r = 0; r < n; ++r) {
      Tensor part = tensor.narrow(dim, r * chunk, chunk);
      send.insert(send.end(), part.data().begin(), part.data().end());
    }
  }
  pg.backend().scatter<float>(send, out.data(), 0);
  return out;
}

Tensor gather_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg) {
  require_member("gather_tensor", pg);
  check_ranks_agree("gather_tensor", {tensor.shape()}, static_cast<std::int64_t>(dim), pg);  // first, as above
  if (dim >= tensor.dim()) {
    throw InvalidArgument("gather_tensor on rank " + std::to_string(pg.rank()) + ": dim " +
                          std::to_string(dim) + " is out of range for shape " +
                          to_string(tensor.shape()));
  }
  Tensor stacked = pg.all_gather_tensor(tensor);
  std::vector<Tensor> parts;
  for (int r = 0; r < pg.size(); ++r) {
    parts.push_back(stacked.narrow(0, static_cast<std::size_t>(r), 1).reshape(tensor.shape()));
  }
  return Tensor::cat(parts, dim);
}

void sync_gradients(std::vector<Tensor>& gradients, const ProcessGroup& pg) {
  require_member("sync_gradients", pg);
  std::vector<Shape> shapes;
  for (const Tensor& g : gradients) shapes.push_back(g.shape());
  check_ranks_agree("sync_gradients", shapes, -1, pg,
                    ", in the same order (this rank's: " + shapes_of(gradients) + ")");
  std::vector<Tensor*> tensors;
  for (Tensor& g : gradients) tensors.push_back(&g);
  std::vector<float> flat = flatten(tensors);
  pg.backend().all_reduce(flat, ReduceOp::Average);
  unflatten(flat, tensors);
}

void sync_gradient(Tensor& gradient, const ProcessGroup& pg) {
  pg.all_reduce_tensor(gradient, ReduceOp::Average);
}

}  // namespace axonml::distributed
