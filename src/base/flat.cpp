#include "base/flat.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace axonml::distributed {

std::vector<float> flatten(std::span<const Tensor* const> tensors) {
  std::size_t total = 0;
  for (const Tensor* t : tensors) total += t->numel();
  std::vector<float> flat(total);
  auto at = flat.begin();
  for (const Tensor* t : tensors) at = std::copy(t->data().begin(), t->data().end(), at);
  return flat;
}

void unflatten(std::span<const float> flat, std::span<Tensor* const> tensors) {
  std::size_t offset = 0;
  for (Tensor* t : tensors) {
    check::less_equal(offset + t->numel(), flat.size(), "unflatten: flat holds every tensor");
    std::copy_n(flat.begin() + static_cast<long>(offset), t->numel(), t->data().begin());
    offset += t->numel();
  }
  check::equal(offset, flat.size(), "unflatten: flat holds exactly the tensors");
}

}  // namespace axonml::distributed
