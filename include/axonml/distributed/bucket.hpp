// GradientBucket: gradients packed into one flat buffer so that one
// all-reduce moves them all.
//
// add() appends a tensor's elements (false, and no change, when they would
// not fit); data_mut() is the packed prefix to reduce; extract() cuts it back
// into tensors of the original shapes.
//
// Thread safety: none; one owner.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

class GradientBucket {
 public:
  // Room for `capacity` floats.
  explicit GradientBucket(std::size_t capacity);

  bool add(const Tensor& tensor);
  bool is_full() const { return size_ == capacity(); }
  bool is_empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }  // floats used
  std::size_t capacity() const { return storage_.size(); }
  std::size_t tensor_count() const { return shapes_.size(); }

  std::span<const float> data() const { return {storage_.data(), size_}; }
  std::span<float> data_mut() { return {storage_.data(), size_}; }

  // New tensors, one per add(), in order.
  std::vector<Tensor> extract() const;
  void clear();

 private:
  std::vector<float> storage_;
  std::size_t size_ = 0;
  std::vector<Shape> shapes_;
  std::vector<std::size_t> offsets_;
};

}  // namespace axonml::distributed
