// BlockRounds: how the n blocks of a scatter-like collective (scatter,
// reduce_scatter) travel through one slot per round.
//
// Each round carries `per_block` elements of each of up to `blocks` blocks
// (a "window" of the n blocks) side by side in the slot. With a slot of at
// least n elements that is every block at once (one window) and as many
// elements of each as fit; a smaller slot carries one element of `blocks`
// blocks per round, and the windows take turns. Every member computes the
// same schedule from (count, n, slot bytes, element size), so they agree on
// the number of rounds, and every slot size of at least one element works.
#pragma once

#include <algorithm>
#include <cstddef>

namespace axonml::distributed::collectives {

struct BlockRounds {
  // REQUIRES: slot_bytes >= element_bytes > 0; members > 0.
  BlockRounds(std::size_t count, std::size_t members, std::size_t slot_bytes, std::size_t element_bytes)
      : count(count), members(members) {
    const std::size_t per_slot = slot_bytes / element_bytes;
    per_block = std::max<std::size_t>(1, per_slot / members);
    blocks = std::min(members, per_slot / per_block);
    windows = (members + blocks - 1) / blocks;
    steps = std::max<std::size_t>(1, (count + per_block - 1) / per_block);
  }

  std::size_t rounds() const { return steps * windows; }
  // Round k moves elements [offset, offset + length) of blocks
  // [first_block, first_block + window_blocks); block b's piece sits at
  // element (b - first_block) * per_block of the slot.
  std::size_t offset(std::size_t k) const { return k / windows * per_block; }
  std::size_t length(std::size_t k) const { return std::min(per_block, count - std::min(count, offset(k))); }
  std::size_t first_block(std::size_t k) const { return k % windows * blocks; }
  std::size_t window_blocks(std::size_t k) const { return std::min(blocks, members - first_block(k)); }

  std::size_t count;
  std::size_t members;
  std::size_t per_block;  // elements of each block per round
  std::size_t blocks;     // blocks per round
  std::size_t windows;    // rounds that cover all blocks once
  std::size_t steps;      // element offsets
};

}  // namespace axonml::distributed::collectives
