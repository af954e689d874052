#include "torch/arena_storage.hpp"

#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <utility>

namespace axonml::torch {
namespace ad = axonml::distributed;

namespace {

// The DataPtr context of a storage moved into an arena: the block, whose
// last pointer gives it back (and keeps that arena mapped meanwhile), and,
// when asked, the memory it moved from.
struct ArenaBlock {
  std::shared_ptr<std::byte> memory;
  at::DataPtr previous;
};

void release_block(void* context) { delete static_cast<ArenaBlock*>(context); }

const ArenaBlock* block_of(const c10::StorageImpl& storage) {
  const at::DataPtr& data = storage.data_ptr();
  if (data.get_deleter() != &release_block) return nullptr;
  return static_cast<const ArenaBlock*>(data.get_context());
}

}  // namespace

// By address, not by which group's object made the block: a block keeps its
// arena mapped, so no later arena can lie where it does, while a later
// group's object may well sit where a destroyed one did.
bool storage_in_arena(const at::Tensor& t, const ad::ArenaBackend& arena) {
  if (!t.has_storage()) return false;  // sparse and other storage-less layouts
  const c10::StorageImpl& storage = *t.storage().unsafeGetStorageImpl();
  return block_of(storage) != nullptr && arena.contains(storage.data(), storage.nbytes());
}

std::shared_ptr<std::byte> reserve_for(const at::Tensor& t, ad::ArenaBackend& arena) {
  const c10::StorageImpl& storage = *t.storage().unsafeGetStorageImpl();
  const at::DataPtr& data = storage.data_ptr();
  const bool from_cpu_allocator = data.get_deleter() != nullptr &&
                                  data.get_deleter() == c10::GetDefaultCPUAllocator()->raw_deleter();
  if (!(from_cpu_allocator || block_of(storage)) || storage.nbytes() == 0) return nullptr;
  return arena.allocate_shared(storage.nbytes());
}

void move_storage_into(const at::Tensor& t, std::shared_ptr<std::byte> block, KeepOld keep_old) {
  c10::StorageImpl& storage = *t.storage().unsafeGetStorageImpl();
  std::byte* memory = block.get();
  std::memcpy(memory, storage.data(), storage.nbytes());
  auto* context = new ArenaBlock{std::move(block), at::DataPtr()};
  at::DataPtr old = storage.set_data_ptr(at::DataPtr(memory, context, &release_block, at::Device(at::kCPU)));
  // Otherwise the old memory goes back to its allocator as `old` goes.
  if (keep_old == KeepOld::UntilStorageGoes) context->previous = std::move(old);
}

}  // namespace axonml::torch
