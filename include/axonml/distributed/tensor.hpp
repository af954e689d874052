// Tensor: a dense, row-major f32 array with a shape.
//
// A Tensor is a handle to shared storage, as in PyTorch: copying a Tensor
// shares its elements, clone() copies them. reshape() returns a view of the
// same storage; narrow() and cat() return new tensors. A tensor can also view
// memory owned by someone else (a gradient bucket, the shared-memory arena),
// kept alive through the shared_ptr passed to Tensor::view.
//
// Thread safety: like a std::vector; concurrent reads are safe, a write needs
// exclusive access to the elements it touches.
#pragma once

#include "axonml/distributed/cxx20.hpp"

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace axonml::distributed {

using Shape = std::vector<std::size_t>;

class Tensor {
 public:
  // An empty tensor of shape [0].
  Tensor();
  // Copies share the elements. A moved-from tensor is an empty tensor of
  // shape [0], as Tensor() makes. (Not noexcept: that shape takes an
  // allocation; a container that grows copies Tensors instead, which shares
  // their elements.)
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  Tensor(Tensor&& other);
  Tensor& operator=(Tensor&& other);

  // Throws InvalidArgument when the product of shape differs from data.size().
  static Tensor from_vec(std::vector<float> data, Shape shape);
  static Tensor zeros(Shape shape);
  static Tensor full(Shape shape, float value);
  // A tensor over `numel(shape)` floats at `data`, owned by `owner`.
  // Throws InvalidArgument when data is null and the shape has elements.
  static Tensor view(std::shared_ptr<float> data, Shape shape);
  // Concatenates along `dim`; all other dims must match.
  static Tensor cat(const std::vector<Tensor>& tensors, std::size_t dim);

  const Shape& shape() const { return shape_; }
  std::size_t dim() const { return shape_.size(); }
  std::size_t numel() const { return numel_; }
  std::span<float> data() { return {data_.get(), numel_}; }
  std::span<const float> data() const { return {data_.get(), numel_}; }
  std::vector<float> to_vec() const;

  // A view with another shape of the same number of elements.
  Tensor reshape(Shape shape) const;
  // Elements [start, start + length) of dimension `dim`, as a new tensor.
  Tensor narrow(std::size_t dim, std::size_t start, std::size_t length) const;
  Tensor clone() const;
  // Copies src's elements into this tensor; shapes must match.
  void copy_from(const Tensor& src);
  bool shares_storage_with(const Tensor& other) const;

  float& operator[](std::size_t i) { return data_.get()[i]; }
  float operator[](std::size_t i) const { return data_.get()[i]; }

 private:
  Tensor(std::shared_ptr<float> data, Shape shape);

  std::shared_ptr<float> data_;
  Shape shape_;
  std::size_t numel_ = 0;
};

// The product of the sizes. Throws InvalidArgument naming the shape when it
// overflows, or when that many floats could not fit in memory.
std::size_t numel_of(const Shape& shape);
std::string to_string(const Shape& shape);

}  // namespace axonml::distributed
