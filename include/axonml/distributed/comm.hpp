// The collective shorthands on tensors (all_reduce_sum, broadcast, …).
//
// Each is a collective over `pg` (every member calls it) except rank(),
// world_size() and is_main_process(). Tensors are updated in place where the
// function returns nothing.
//
// Thread safety: as ProcessGroup: one thread at a time per group on each
// rank; different groups may be used from different threads.
#pragma once

#include <cstddef>
#include <vector>

#include "axonml/distributed/process_group.hpp"
#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

void all_reduce_sum(Tensor& tensor, const ProcessGroup& pg);
void all_reduce_mean(Tensor& tensor, const ProcessGroup& pg);
void all_reduce_min(Tensor& tensor, const ProcessGroup& pg);
void all_reduce_max(Tensor& tensor, const ProcessGroup& pg);
void all_reduce_product(Tensor& tensor, const ProcessGroup& pg);

// From group rank 0, or from `src`.
void broadcast(Tensor& tensor, const ProcessGroup& pg);
void broadcast_from(Tensor& tensor, int src, const ProcessGroup& pg);

// Shape [pg.size(), ...tensor.shape()]. Every rank passes the same shape;
// the call itself compares only element counts (as PyTorch's all_gather
// does, and at no extra cost), so a rank whose shape differs with as many
// elements reads the others' data in its own shape. gather_tensor() below
// compares the shapes too.
Tensor all_gather(const Tensor& tensor, const ProcessGroup& pg);
// This rank's block of the sum (mean) of `tensor` split into pg.size() blocks.
Tensor reduce_scatter_sum(const Tensor& tensor, const ProcessGroup& pg);
Tensor reduce_scatter_mean(const Tensor& tensor, const ProcessGroup& pg);

void barrier(const ProcessGroup& pg);
bool is_main_process(const ProcessGroup& pg);
int world_size(const ProcessGroup& pg);
int rank(const ProcessGroup& pg);

// Model parallelism: group rank 0's `tensor` split into pg.size() equal
// chunks along `dim`; returns this rank's chunk. Every rank passes a tensor of
// the same shape and the same dim (only rank 0's values are read). Throws
// InvalidArgument when shape[dim] does not divide evenly, and
// CollectiveMismatch on every rank when the ranks' shapes or dims differ
// (one small all_gather compares them first).
Tensor scatter_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg);
// The inverse: every rank's chunk concatenated along `dim`, on every rank.
// Every rank passes the same shape and dim, or all get CollectiveMismatch.
Tensor gather_tensor(const Tensor& tensor, std::size_t dim, const ProcessGroup& pg);

// Averages gradients over the group, in place (one all-reduce for the lot,
// after one small all_gather that checks every rank passes the same shapes in
// the same order: CollectiveMismatch on every rank otherwise, the gradients
// untouched).
void sync_gradients(std::vector<Tensor>& gradients, const ProcessGroup& pg);
void sync_gradient(Tensor& gradient, const ProcessGroup& pg);

}  // namespace axonml::distributed
