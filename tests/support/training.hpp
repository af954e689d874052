// Pieces the DDP tests share: a labelled batch, a rank's shard of it, and a
// module's parameters (or gradients) as one flat vector.
#pragma once

#include <vector>

#include "axonml/distributed/tensor.hpp"
#include "axonml/nn/module.hpp"

namespace axon_test {

struct Batch {
  axonml::distributed::Tensor x;
  std::vector<int> y;
};

// Rows [begin, begin + count) of a batch: a rank's shard.
inline Batch shard(const Batch& b, std::size_t begin, std::size_t count) {
  return {b.x.narrow(0, begin, count),
          std::vector<int>(b.y.begin() + static_cast<long>(begin), b.y.begin() + static_cast<long>(begin + count))};
}

inline std::vector<float> flatten_values(axonml::nn::Module& m) {
  std::vector<float> out;
  for (axonml::nn::Parameter* p : m.parameters()) {
    auto v = p->value().to_vec();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline std::vector<float> flatten_grads(axonml::nn::Module& m) {
  std::vector<float> out;
  for (axonml::nn::Parameter* p : m.parameters()) {
    auto v = p->grad().to_vec();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace axon_test
