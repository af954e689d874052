// The prelude of the minimal nn: layers, losses and SGD, enough to train an
// MLP with DistributedDataParallel.
#pragma once

#include "axonml/nn/activation.hpp"
#include "axonml/nn/linear.hpp"
#include "axonml/nn/loss.hpp"
#include "axonml/nn/module.hpp"
#include "axonml/nn/optim.hpp"
#include "axonml/nn/parameter.hpp"
#include "axonml/nn/sequential.hpp"
#include "axonml/nn/threads.hpp"

// So that `using namespace axonml::distributed;` also makes `nn::Linear` work.
namespace axonml::distributed {
namespace nn = ::axonml::nn;
}  // namespace axonml::distributed
