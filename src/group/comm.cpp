#include "axonml/distributed/comm.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/flat.hpp"
#include "base/hash.hpp"

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

// What a rank passes to a helper whose result takes its shape from every
// rank's arguments: up to kShownDims dims as they are, and a digest of the
// whole list (longer shapes, or a list of tensors). Fixed size, so that one
// small all_gather carries every rank's.
constexpr std::size_t kShownDims = 8;
struct Arguments {
  std::int64_t tensors = 1;  // 1, or the gradient list's length
  std::int64_t dim = -1;     // the split / concatenation dim; -1: none
  std::int64_t ndim = 0;
  std::int64_t numel = 0;
  std::int64_t digest = 0;   // of every shape passed, in order
  std::array<std::int64_t, kShownDims> dims{};
  bool operator==(const Arguments&) const = default;

  static constexpr std::size_t kWords = 5 + kShownDims;
  std::array<std::int64_t, kWords> words() const {
    std::array<std::int64_t, kWords> w{tensors, dim, ndim, numel, digest};
    std::copy(dims.begin(), dims.end(), w.begin() + 5);
    return w;
  }
  static Arguments from(const std::int64_t* w) {
    Arguments a;
    a.tensors = w[0], a.dim = w[1], a.ndim = w[2], a.numel = w[3], a.digest = w[4];
    std::copy(w + 5, w + kWords, a.dims.begin());
    return a;
  }
};

Arguments arguments_of(const std::vector<const Shape*>& shapes, std::int64_t dim) {
  Arguments a;
  a.tensors = static_cast<std::int64_t>(shapes.size());
  a.dim = dim;
  Fnv1a digest;
  for (const Shape* shape : shapes) {
    digest.add(shape->size());
    std::size_t numel = 1;
    for (std::size_t d : *shape) {
      digest.add(d);
      numel *= d;
    }
    a.numel += static_cast<std::int64_t>(numel);
  }
  a.digest = static_cast<std::int64_t>(digest.value());
  if (shapes.size() == 1) {
    a.ndim = static_cast<std::int64_t>(shapes[0]->size());
    for (std::size_t d = 0; d < std::min(kShownDims, shapes[0]->size()); ++d) {
      a.dims[d] = static_cast<std::int64_t>((*shapes[0])[d]);
    }
  }
  return a;
}

std::string describe(const Arguments& a) {
  if (a.tensors != 1) {
    return std::to_string(a.tensors) + " tensors of " + std::to_string(a.numel) + " elements in all";
  }
  std::string s;
  if (a.ndim <= static_cast<std::int64_t>(kShownDims)) {
    Shape shape;
    for (std::int64_t d = 0; d < a.ndim; ++d) shape.push_back(static_cast<std::size_t>(a.dims[static_cast<std::size_t>(d)]));
    s = "shape " + to_string(shape);
  } else {
    s = "a shape of " + std::to_string(a.ndim) + " dims (" + std::to_string(a.numel) + " elements)";
  }
  return a.dim < 0 ? s : s + " along dim " + std::to_string(a.dim);
}

// Why: the results of scatter_tensor, gather_tensor and sync_gradients take
// their shape (or their layout) from every rank's arguments, but their data
// collective compares only element counts. Ranks that passed the same count
// in other shapes, another dim, or another split of a gradient list got
// results of different shapes, or rank 0's data cut the wrong way, silently
// (found by a review). Every rank sees every rank's arguments and throws the
// same CollectiveMismatch, naming rank 0's and the first that differs.
void check_ranks_agree(const char* op, const Arguments& mine, const ProcessGroup& pg, const std::string& own_detail = "") {
  const auto n = static_cast<std::size_t>(pg.size());
  if (n == 1) return;
  constexpr std::size_t kWords = Arguments::kWords;
  const auto words = mine.words();
  std::vector<std::int64_t> all(kWords * n);
  pg.backend().all_gather<std::int64_t>(words, all);
  std::vector<Arguments> each;
  for (std::size_t r = 0; r < n; ++r) each.push_back(Arguments::from(all.data() + r * kWords));
  for (std::size_t r = 1; r < n; ++r) {
    if (each[r] == each[0]) continue;
    std::string theirs = describe(each[r]);
    if (describe(each[r]) == describe(each[0])) theirs += " of other shapes";
    throw CollectiveMismatch(std::string(op) + " on rank " + std::to_string(pg.rank()) +
                             ": the ranks' arguments differ: rank 0 passes " + describe(each[0]) + ", rank " +
                             std::to_string(r) + " passes " + theirs +
                             "; every rank must pass the same shapes" + own_detail);
  }
}

std::string shapes_of(const std::vector<Tensor>& tensors) {
  std::string s;
  for (const Tensor& t : tensors) s += (s.empty() ? "" : ", ") + to_string(t.shape());
  return s;
}

}  // namespace

// Rank 0 lays its chunks out one after another (chunk r is narrow(dim, r*c, c),
// made contiguous), so a plain scatter hands each rank its own.
Tensor scatter_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg) {
  check_split("scatter_tensor", tensor, dim, pg);
  check_ranks_agree("scatter_tensor", arguments_of({&tensor.shape()}, static_cast<std::int64_t>(dim)), pg);
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
  check_ranks_agree("gather_tensor", arguments_of({&tensor.shape()}, static_cast<std::int64_t>(dim)), pg);
  Tensor stacked = pg.all_gather_tensor(tensor);
  std::vector<Tensor> parts;
  for (int r = 0; r < pg.size(); ++r) {
    parts.push_back(stacked.narrow(0, static_cast<std::size_t>(r), 1).reshape(tensor.shape()));
  }
  return Tensor::cat(parts, dim);
}

void sync_gradients(std::vector<Tensor>& gradients, const ProcessGroup& pg) {
  std::vector<const Shape*> shapes;
  for (const Tensor& g : gradients) shapes.push_back(&g.shape());
  check_ranks_agree("sync_gradients", arguments_of(shapes, -1), pg,
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
