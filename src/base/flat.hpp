// Packing several tensors into one flat buffer, so that one collective moves
// them all (gradients, parameters), and copying the result back.
//
// Thread safety: none beyond the tensors'; one caller.
#pragma once

#include <span>
#include <vector>

#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

// The elements of `tensors`, one tensor after another.
std::vector<float> flatten(std::span<const Tensor* const> tensors);

// Copies `flat` back into `tensors`, in the order flatten() packed them.
// REQUIRES: flat.size() is the sum of the tensors' numel().
void unflatten(std::span<const float> flat, std::span<Tensor* const> tensors);

}  // namespace axonml::distributed
