#include "axonml/distributed/tensor.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>

#include "axonml/distributed/error.hpp"

namespace axonml::distributed {
namespace {

std::shared_ptr<float> allocate(std::size_t count) {
  return std::shared_ptr<float>(new float[std::max<std::size_t>(count, 1)](),
                                std::default_delete<float[]>());
}

}  // namespace

// Checked: a product that wraps around (or whose floats would not fit in an
// address space) would make a tensor that claims fewer or more elements than
// it has, so it is an error naming the shape.
std::size_t numel_of(const Shape& shape) {
  constexpr std::size_t kMaxElements = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float);
  std::size_t n = 1;
  for (std::size_t dim : shape) {
    if (__builtin_mul_overflow(n, dim, &n) || n > kMaxElements) {
      // A zero anywhere later still makes the product 0.
      if (std::find(shape.begin(), shape.end(), std::size_t{0}) != shape.end()) return 0;
      throw InvalidArgument("shape " + to_string(shape) + " has more elements than can exist (" +
                            "the product of its sizes exceeds " + std::to_string(kMaxElements) +
                            " floats)");
    }
  }
  return n;
}

std::string to_string(const Shape& shape) { return bracketed(shape); }

Tensor::Tensor() : Tensor(allocate(0), Shape{0}) {}

Tensor::Tensor(std::shared_ptr<float> data, Shape shape)
    : data_(std::move(data)), shape_(std::move(shape)), numel_(numel_of(shape_)) {}

Tensor Tensor::from_vec(std::vector<float> data, Shape shape) {
  const std::size_t expected = numel_of(shape);
  if (expected != data.size()) {
    throw InvalidArgument("Tensor::from_vec: shape " + to_string(shape) + " has " +
                          std::to_string(expected) + " elements but the data has " +
                          std::to_string(data.size()));
  }
  auto storage = allocate(data.size());
  std::copy(data.begin(), data.end(), storage.get());
  return Tensor(std::move(storage), std::move(shape));
}

Tensor Tensor::zeros(Shape shape) { return full(std::move(shape), 0.0f); }

Tensor Tensor::full(Shape shape, float value) {
  const std::size_t n = numel_of(shape);
  auto storage = allocate(n);
  std::fill_n(storage.get(), n, value);
  return Tensor(std::move(storage), std::move(shape));
}

// The moved-from tensor is Tensor()'s empty [0] (its elements pointer null,
// which no access of 0 elements reads): left with shape [] and count 4 over a
// null pointer, to_vec() read address 0, and with [] (a scalar, 1 element) a
// clone() claimed an element it did not have (reviews).
Tensor::Tensor(Tensor&& other)
    : data_(std::move(other.data_)), shape_(std::move(other.shape_)), numel_(std::exchange(other.numel_, 0)) {
  other.shape_.assign(1, 0);
}

Tensor& Tensor::operator=(Tensor&& other) {
  if (this != &other) {
    data_ = std::move(other.data_);
    shape_ = std::move(other.shape_);
    numel_ = std::exchange(other.numel_, 0);
    other.shape_.assign(1, 0);
  }
  return *this;
}

Tensor Tensor::view(std::shared_ptr<float> data, Shape shape) {
  const std::size_t numel = numel_of(shape);
  if (!data && numel != 0) {
    throw InvalidArgument("Tensor::view: null data for shape " + to_string(shape) + " (" + std::to_string(numel) +
                          " elements)");
  }
  return Tensor(std::move(data), std::move(shape));
}

std::vector<float> Tensor::to_vec() const {
  auto d = data();
  return {d.begin(), d.end()};
}

Tensor Tensor::reshape(Shape shape) const {
  const std::size_t n = numel_of(shape);
  if (n != numel_) {
    throw InvalidArgument("Tensor::reshape: cannot view " + to_string(shape_) + " (" +
                          std::to_string(numel_) + " elements) as " + to_string(shape) + " (" +
                          std::to_string(n) + " elements)");
  }
  return Tensor(data_, std::move(shape));
}

Tensor Tensor::clone() const {
  auto storage = allocate(numel_);
  std::copy_n(data_.get(), numel_, storage.get());
  return Tensor(std::move(storage), shape_);
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_) {
    throw InvalidArgument("Tensor::copy_from: source shape " + to_string(src.shape_) +
                          " differs from destination shape " + to_string(shape_));
  }
  if (numel_) std::memmove(data_.get(), src.data_.get(), numel_ * sizeof(float));
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  const float* a = data_.get();
  const float* b = other.data_.get();
  return a < b + other.numel_ && b < a + numel_;
}

// A row-major tensor seen as [outer, dim, inner]: narrowing keeps every
// outer block and, within it, `length` runs of `inner` contiguous floats.
Tensor Tensor::narrow(std::size_t dim, std::size_t start, std::size_t length) const {
  if (dim >= shape_.size()) {
    throw InvalidArgument("Tensor::narrow: dim " + std::to_string(dim) + " is out of range for shape " +
                          to_string(shape_));
  }
  if (start > shape_[dim] || length > shape_[dim] - start) {
    // Start and length as given: their sum may wrap around.
    throw InvalidArgument("Tensor::narrow: start " + std::to_string(start) + " and length " +
                          std::to_string(length) + " exceed size " +
                          std::to_string(shape_[dim]) + " of dim " + std::to_string(dim) +
                          " in shape " + to_string(shape_));
  }
  const std::size_t outer = numel_of(Shape(shape_.begin(), shape_.begin() + static_cast<long>(dim)));
  const std::size_t inner = numel_of(Shape(shape_.begin() + static_cast<long>(dim) + 1, shape_.end()));
  Shape out_shape = shape_;
  out_shape[dim] = length;
  Tensor out = zeros(out_shape);
  for (std::size_t o = 0; o < outer; ++o) {
    std::copy_n(data_.get() + (o * shape_[dim] + start) * inner, length * inner,
                out.data_.get() + o * length * inner);
  }
  return out;
}

Tensor Tensor::cat(const std::vector<Tensor>& tensors, std::size_t dim) {
  if (tensors.empty()) throw InvalidArgument("Tensor::cat: no tensors to concatenate");
  const Shape& first = tensors.front().shape();
  if (dim >= first.size()) {
    throw InvalidArgument("Tensor::cat: dim " + std::to_string(dim) + " is out of range for shape " +
                          to_string(first));
  }
  Shape out_shape = first;
  out_shape[dim] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Shape& s = tensors[i].shape();
    bool compatible = s.size() == first.size();
    for (std::size_t d = 0; compatible && d < s.size(); ++d) compatible = d == dim || s[d] == first[d];
    if (!compatible) {
      throw InvalidArgument("Tensor::cat: tensor " + std::to_string(i) + " has shape " + to_string(s) +
                            ", which does not match " + to_string(first) + " outside dim " +
                            std::to_string(dim));
    }
    out_shape[dim] += s[dim];
  }
  const std::size_t outer = numel_of(Shape(first.begin(), first.begin() + static_cast<long>(dim)));
  const std::size_t inner = numel_of(Shape(first.begin() + static_cast<long>(dim) + 1, first.end()));
  Tensor out = zeros(out_shape);
  float* dest = out.data_.get();
  for (std::size_t o = 0; o < outer; ++o) {
    for (const Tensor& t : tensors) {
      const std::size_t run = t.shape()[dim] * inner;
      std::copy_n(t.data_.get() + o * run, run, dest);
      dest += run;
    }
  }
  return out;
}

}  // namespace axonml::distributed
