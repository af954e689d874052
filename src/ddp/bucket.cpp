#include "axonml/distributed/bucket.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "axonml/distributed/error.hpp"

namespace axonml::distributed {

namespace {

std::size_t checked_capacity(std::size_t capacity) {
  if (capacity > static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float)) {
    throw InvalidArgument("GradientBucket: capacity of " + std::to_string(capacity) +
                          " floats is more than can exist");
  }
  return capacity;
}

}  // namespace

GradientBucket::GradientBucket(std::size_t capacity) : storage_(checked_capacity(capacity)) {}

bool GradientBucket::add(const Tensor& tensor) {
  if (tensor.numel() > capacity() - size_) return false;
  std::copy(tensor.data().begin(), tensor.data().end(), storage_.begin() + static_cast<long>(size_));
  offsets_.push_back(size_);
  shapes_.push_back(tensor.shape());
  size_ += tensor.numel();
  return true;
}

std::vector<Tensor> GradientBucket::extract() const {
  std::vector<Tensor> out;
  out.reserve(shapes_.size());
  for (std::size_t i = 0; i < shapes_.size(); ++i) {
    const std::size_t n = numel_of(shapes_[i]);
    const auto begin = storage_.begin() + static_cast<long>(offsets_[i]);
    out.push_back(Tensor::from_vec(std::vector<float>(begin, begin + static_cast<long>(n)), shapes_[i]));
  }
  return out;
}

void GradientBucket::clear() {
  size_ = 0;
  shapes_.clear();
  offsets_.clear();
}

}  // namespace axonml::distributed
