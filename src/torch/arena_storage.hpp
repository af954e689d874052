// Moving a tensor's storage into a group's arena, so that the runtime
// all-reduces it in place (zero copy: peers read it where it lies, with no
// copy through the slots), as it does for ProcessGroup::alloc_shared buffers
// in the C++ API. For PyTorch the tensors already exist (DDP's gradient
// buckets), so instead of allocating them there we swap the memory under
// their storage: every tensor and view sharing it (with
// gradient_as_bucket_view, the parameters' .grad) follows.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "axonml/distributed/arena_backend.hpp"

namespace axonml::torch {

// Whether the storage of `t` already lies in `arena`'s shared memory.
bool storage_in_arena(const at::Tensor& t, const distributed::ArenaBackend& arena);

// What move_storage_into() needs, taken before the ranks agree: an arena
// block of the storage's size, or nullptr when the arena has no room or the
// storage's memory belongs to someone else (a numpy array's, from_blob's:
// moving it would silently end that sharing). Only memory from PyTorch's
// CPU allocator, or from another group's arena, is moved.
std::shared_ptr<std::byte> reserve_for(const at::Tensor& t, distributed::ArenaBackend& arena);

// What becomes of the memory a storage moves from.
enum class KeepOld {
  // Freed at once: nothing outside PyTorch points into it (DDP's buckets,
  // which DDP itself reallocates when it rebuilds them).
  No,
  // Kept until the storage goes: raw pointers taken before the move (a
  // numpy array from tensor.numpy(), an op of another group still running
  // on the tensor) keep pointing at valid memory, though no longer the
  // tensor's.
  UntilStorageGoes,
};

// Copies the storage's bytes into `block` and makes it the storage's memory.
// The block goes back to the arena when the storage goes away (it keeps the
// arena mapped until then, even past the group's end).
// REQUIRES: block from reserve_for(t, arena); nothing writes the storage
// meanwhile.
void move_storage_into(const at::Tensor& t, std::shared_ptr<std::byte> block, KeepOld keep_old);

}  // namespace axonml::torch
