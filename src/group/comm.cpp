#include "axonml/distributed/comm.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"
#include "base/flat.hpp"

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

}  // namespace

// Rank 0 lays its chunks out one after another (chunk r is narrow(dim, r*c, c),
// made contiguous), so a plain scatter hands each rank its own.
Tensor scatter_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg) {
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
