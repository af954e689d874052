// How the torch layer hands tensors to the runtime's Backend: element types,
// contiguous staging, the checks every op makes, and the local combine used
// for reductions the runtime has no kernel for.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "axonml/distributed/backend.hpp"

namespace axonml::torch {

// The runtime's element type for a dtype it reduces, if any.
std::optional<distributed::DataType> native_type(at::ScalarType type);

// The runtime's reduce op for a c10d one it runs (SUM, AVG, PRODUCT, MIN,
// MAX), if any. Throws InvalidArgument for PREMUL_SUM and unknown ops.
std::optional<distributed::ReduceOp> native_op(const c10d::ReduceOp& op, const std::string& where);

// Throws InvalidArgument naming `where` unless the tensor is a dense CPU one.
void check_tensor(const at::Tensor& t, const std::string& where);
void check_same_dtype(const at::Tensor& t, at::ScalarType type, const std::string& where);
// Throws InvalidArgument unless the bitwise op / AVG suits the dtype.
void check_fallback(const c10d::ReduceOp& op, at::ScalarType type, const std::string& where);

// Elementwise combine of `parts` (rank order) into `out` with `op`; `out` is
// contiguous, as long as each part, and none of them.
void combine(const std::vector<at::Tensor>& parts, const c10d::ReduceOp& op, at::Tensor& out);

// Calls the runtime with raw bytes of `count` elements of `type`.
void all_reduce(distributed::Backend& b, at::Tensor& flat, distributed::ReduceOp op);
void reduce(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv, int root,
            distributed::ReduceOp op);
void reduce_scatter(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv,
                    distributed::ReduceOp op);
// Data movement of any dtype: the tensors are contiguous and move as their
// native type when it has one, else as raw bytes.
void broadcast(distributed::Backend& b, at::Tensor& flat, int root);
void all_gather(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv);
void gather(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv, int root);
void scatter(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv, int root);
void all_to_all(distributed::Backend& b, const at::Tensor& send, at::Tensor& recv);
void send(distributed::Backend& b, const at::Tensor& flat, int dst, int tag);
void recv(distributed::Backend& b, at::Tensor& flat, int src, int tag);

}  // namespace axonml::torch
