#include "axonml/distributed/process_group.hpp"
#include "base/text.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/mock_backend.hpp"

namespace axonml::distributed {
namespace {

// Every rank of `backend`; the precondition every constructor from a backend
// checks first (a null one crashed ProcessGroup(nullptr) and World(nullptr);
// a review).
std::vector<int> all_ranks(const Backend* backend, const char* who) {
  if (backend == nullptr) throw InvalidArgument(std::string(who) + ": null backend");
  std::vector<int> ranks(static_cast<std::size_t>(backend->world_size()));
  for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  return ranks;
}

}  // namespace

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> backend)
    : parent_(backend),
      ranks_(all_ranks(backend.get(), "ProcessGroup")),
      communicator_(std::move(backend)),
      parent_outer_ranks_(ranks_) {}

ProcessGroup::ProcessGroup(std::shared_ptr<Backend> parent, std::vector<int> ranks,
                           std::shared_ptr<Backend> communicator, std::vector<int> parent_outer_ranks)
    : parent_(std::move(parent)),
      ranks_(std::move(ranks)),
      communicator_(std::move(communicator)),
      parent_outer_ranks_(std::move(parent_outer_ranks)) {}

ProcessGroup ProcessGroup::with_ranks(std::shared_ptr<Backend> backend, std::vector<int> ranks) {
  if (!backend) throw InvalidArgument("ProcessGroup::with_ranks: null backend");
  auto communicator = backend->new_group(ranks);
  std::vector<int> outer = all_ranks(backend.get(), "ProcessGroup::with_ranks");
  return ProcessGroup(std::move(backend), std::move(ranks), std::move(communicator), std::move(outer));
}

ProcessGroup ProcessGroup::mock() { return ProcessGroup(MockBackend::single()); }

ProcessGroup ProcessGroup::new_group(std::vector<int> ranks) const {
  member_backend("new_group");
  ProcessGroup group = with_ranks(communicator_, std::move(ranks));
  group.parent_outer_ranks_ = outer_ranks(ranks_);
  return group;
}

std::vector<int> ProcessGroup::outer_ranks(const std::vector<int>& parent_ranks) const {
  std::vector<int> outer;
  outer.reserve(parent_ranks.size());
  for (int r : parent_ranks) {
    const bool known = r >= 0 && static_cast<std::size_t>(r) < parent_outer_ranks_.size();
    outer.push_back(known ? parent_outer_ranks_[static_cast<std::size_t>(r)] : r);
  }
  return outer;
}

bool ProcessGroup::is_nested() const {
  for (std::size_t r = 0; r < parent_outer_ranks_.size(); ++r) {
    if (parent_outer_ranks_[r] != static_cast<int>(r)) return true;
  }
  return false;
}

Backend& ProcessGroup::member_backend(const char* op) const {
  if (!parent_) {  // moved from: no rank to name (it crashed asking for one; a review)
    throw InvalidArgument(std::string(op) + ": this ProcessGroup is empty (it was moved from)");
  }
  if (!communicator_) {
    throw InvalidArgument(std::string(op) + ": rank " + std::to_string(outer_ranks({parent_->rank()}).front()) +
                          " is not a member of " + describe());
  }
  return *communicator_;
}

Backend& ProcessGroup::backend() const { return member_backend("backend"); }

const std::shared_ptr<Backend>& ProcessGroup::backend_ptr() const {
  member_backend("backend");
  return communicator_;
}

int ProcessGroup::rank() const { return communicator_ ? communicator_->rank() : -1; }

bool ProcessGroup::contains(int rank) const {
  return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end();
}

std::string ProcessGroup::describe() const {
  if (!is_nested()) return "group " + bracketed_ranks(ranks_);
  return "group " + bracketed_ranks(outer_ranks(ranks_)) + " (ranks " + bracketed_ranks(ranks_) + " of its parent group " +
         bracketed_ranks(parent_outer_ranks_) + ")";
}

Tensor ProcessGroup::alloc_shared(Shape shape) const {
  Backend& b = member_backend("alloc_shared");
  std::size_t numel = 0;
  try {
    numel = numel_of(shape);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("alloc_shared on rank " + std::to_string(rank()) + " of " + describe() +
                          ": " + e.what());
  }
  const std::size_t bytes = numel * sizeof(float);  // numel_of keeps this in range
  std::shared_ptr<std::byte> memory = b.allocate_shared(bytes);
  if (!memory) {
    const std::string left = b.describe_shared_memory();
    const std::string where = "alloc_shared on rank " + std::to_string(rank()) + " of " + describe() + ": the " +
                              std::string(b.name()) + " backend ";
    // A backend with no shared memory at all (MPI across nodes, the mock
    // world) is not one that ran out: raising --arena-mb cannot help there
    // (found by a review: under mpirun it named axon-launch's option).
    if (left.empty()) {
      throw InvalidArgument(where + "has no shared memory to place " + std::to_string(bytes) +
                            " bytes in (alloc_shared works under axon-launch; with this backend, use an "
                            "ordinary Tensor)");
    }
    throw InvalidArgument(where + "has no shared memory left for " + std::to_string(bytes) + " bytes: " + left +
                          " (raise axon-launch --arena-mb, or drop unused shared tensors)");
  }
  return Tensor::view(std::shared_ptr<float>(memory, reinterpret_cast<float*>(memory.get())), std::move(shape));
}

void ProcessGroup::barrier() const { member_backend("barrier").barrier(); }

void ProcessGroup::all_reduce_tensor(Tensor& tensor, ReduceOp op) const {
  member_backend("all_reduce").all_reduce(tensor.data(), op);
}

void ProcessGroup::broadcast_tensor(Tensor& tensor, int src) const {
  member_backend("broadcast").broadcast(tensor.data(), src);
}

Tensor ProcessGroup::all_gather_tensor(const Tensor& tensor) const {
  Backend& b = member_backend("all_gather");
  Shape shape = tensor.shape();
  shape.insert(shape.begin(), static_cast<std::size_t>(size()));
  Tensor out = Tensor::zeros(shape);
  b.all_gather(tensor.data(), out.data());
  return out;
}

Tensor ProcessGroup::reduce_scatter_tensor(const Tensor& tensor, ReduceOp op) const {
  Backend& b = member_backend("reduce_scatter");
  const auto n = static_cast<std::size_t>(size());
  if (tensor.numel() % n != 0) {
    b.count_refused_collective();  // the peers may be in this call: see Backend
    throw InvalidArgument("reduce_scatter on rank " + std::to_string(rank()) + " of " + describe() +
                          ": " + std::to_string(tensor.numel()) +
                          " elements do not split evenly into " + std::to_string(n) + " blocks");
  }
  Shape shape = tensor.shape();
  if (!shape.empty() && shape[0] % n == 0) {
    shape[0] /= n;
  } else {
    shape = Shape{tensor.numel() / n};
  }
  Tensor out = Tensor::zeros(shape);
  b.reduce_scatter(tensor.data(), out.data(), op);
  return out;
}

void ProcessGroup::send_tensor(const Tensor& tensor, int dst, int tag) const {
  member_backend("send").send(tensor.data(), dst, tag);
}

void ProcessGroup::recv_tensor(Tensor& tensor, int src, int tag) const {
  member_backend("recv").recv(tensor.data(), src, tag);
}

}  // namespace axonml::distributed
