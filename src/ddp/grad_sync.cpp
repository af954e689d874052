#include "axonml/distributed/grad_sync.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/hash.hpp"
#include "ddp/comm_worker.hpp"

namespace axonml::distributed {
namespace {

template <typename T>
std::shared_ptr<T> allocate_on_heap(std::size_t count) {
  return std::shared_ptr<T>(new T[std::max<std::size_t>(count, 1)](), std::default_delete<T[]>());
}

// `count` zeroed elements in the backend's shared memory, or null when it has
// no room (or none at all).
template <typename T>
std::shared_ptr<T> allocate_in_shared_memory(Backend& backend, std::size_t count) {
  auto memory = backend.allocate_shared(count * sizeof(T));
  if (!memory) return nullptr;
  auto* elements = reinterpret_cast<T*>(memory.get());
  std::fill_n(elements, count, T{});
  return std::shared_ptr<T>(std::move(memory), elements);
}

// Gradients into a bucket's bf16 twin (round to nearest even) and back.
void round_to_bf16(const float* source, bfloat16* dest, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dest[i] = bfloat16(source[i]);
}

void expand_bf16(const bfloat16* source, float* dest, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dest[i] = static_cast<float>(source[i]);
}

}  // namespace

GradientSynchronizer::GradientSynchronizer(GradSyncStrategy strategy, std::size_t bucket_size,
                                           std::size_t first_bucket_size,
                                           GradientCompression compression)
    : strategy_(strategy),
      bucket_size_(bucket_size),
      first_bucket_size_(first_bucket_size ? first_bucket_size : bucket_size),
      compression_(compression) {
  if (bucket_size == 0) throw InvalidArgument("GradientSynchronizer: bucket_size must be > 0");
  constexpr std::size_t kMaxFloats = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float);
  if (bucket_size > kMaxFloats || first_bucket_size_ > kMaxFloats) {
    throw InvalidArgument("GradientSynchronizer: bucket_size " + std::to_string(bucket_size) +
                          " (first " + std::to_string(first_bucket_size_) +
                          ") floats is more than can exist");
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  // Every bucket launched so far runs, not only the one under way: ranks
  // that ran the same backward launched the same buckets, but their threads
  // had started different numbers of them, and dropping the rest left one
  // rank's last all-reduce to meet a peer's next collective, or a peer that
  // had exited (a review). A failure here was already the group's: the
  // peers get it from their own collectives.
  if (worker_) {
    try {
      worker_->drain();
    } catch (...) {
    }
  }
  worker_.reset();
  release_held_group();
}

namespace {
constexpr const char* kOverlappedHold =
    "its gradient buckets are being reduced on it (GradSyncStrategy::Overlapped, as in "
    "DistributedDataParallel) from the first bucket of a step until sync_all() (DDP: "
    "sync_gradients()) returns, and a collective slipped in between them would run out of step "
    "with the other ranks; call it before backward or after the gradients are synced, or on "
    "another group";
}  // namespace

std::size_t GradientSynchronizer::capacity_of(std::size_t bucket) const {
  return bucket == 0 ? first_bucket_size_ : bucket_size_;
}

void GradientSynchronizer::check_index(const char* op, std::size_t index) const {
  if (index >= gradients_.size()) {
    throw InvalidArgument(std::string("GradientSynchronizer::") + op + ": index " +
                          std::to_string(index) + " is out of range (prepare() made room for " +
                          std::to_string(gradients_.size()) + ")");
  }
}

void GradientSynchronizer::prepare(std::size_t num_params) {
  // A count no vector can hold is a caller's mistake, not an allocation
  // failure: say so instead of letting assign() throw std::length_error.
  if (num_params > gradients_.max_size()) {
    throw InvalidArgument("GradientSynchronizer::prepare: " + std::to_string(num_params) +
                          " parameters is more than any machine can hold");
  }
  wait_for_worker();
  agreed_layouts_.clear();  // a new layout: every rank compares again
  fixed_layout_ = false;
  shapes_.clear();
  bucket_of_.clear();
  offset_in_bucket_.clear();
  gradients_.assign(num_params, std::nullopt);
  buckets_.clear();
  unplaced_ = num_params;
  next_launch_ = 0;
  reduced_.store(0, std::memory_order_release);
}

// The same greedy packing as the learned layout, run over every index now,
// with the storage allocated up front so that slot() can hand out views.
void GradientSynchronizer::prepare(const std::vector<Shape>& shapes) {
  prepare(shapes.size());
  place_in_shared_memory_ = group_ && group_->is_member();
  for (std::size_t i = shapes.size(); i-- > 0;) place(i, numel_of(shapes[i]));
  close_open_bucket();
  if (place_in_shared_memory_) agree_on_shared_buckets();
  place_in_shared_memory_ = false;
  fixed_layout_ = true;
  shapes_ = shapes;
  bucket_of_.assign(shapes.size(), 0);
  offset_in_bucket_.assign(shapes.size(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.missing = bucket.indices.size();
    for (std::size_t k = 0; k < bucket.indices.size(); ++k) {
      bucket_of_[bucket.indices[k]] = b;
      offset_in_bucket_[bucket.indices[k]] = bucket.offsets[k];
    }
  }
  unplaced_ = 0;
}

Tensor GradientSynchronizer::slot(std::size_t index) const {
  if (!fixed_layout_) {
    throw InvalidArgument("GradientSynchronizer::slot: the layout is learned as gradients arrive; "
                          "prepare(shapes) fixes it and makes slots");
  }
  check_index("slot", index);
  const Bucket& bucket = buckets_[bucket_of_[index]];
  // Aliasing constructor: the view keeps the whole bucket alive.
  return Tensor::view(std::shared_ptr<float>(bucket.storage, bucket.storage.get() + offset_in_bucket_[index]),
                      shapes_[index]);
}

// The buffer the all-reduce moves (the f32 bucket, or its bf16 twin) goes in
// the group's shared memory when the backend offers it (the all-reduce then
// skips its copy in), else on the heap. The f32 bucket of a compressed
// synchronizer is never sent, so it stays on the heap.
void GradientSynchronizer::allocate_bucket(Bucket& bucket) const {
  const bool try_shared = place_in_shared_memory_ && bucket.size > 0;
  bucket.shared = false;
  if (compression_ == GradientCompression::BF16) {
    bucket.storage = allocate_on_heap<float>(bucket.size);
    if (try_shared) bucket.wire = allocate_in_shared_memory<bfloat16>(group_->backend(), bucket.size);
    bucket.shared = bucket.wire != nullptr;
    if (!bucket.wire) bucket.wire = allocate_on_heap<bfloat16>(bucket.size);
    return;
  }
  if (try_shared) bucket.storage = allocate_in_shared_memory<float>(group_->backend(), bucket.size);
  bucket.shared = bucket.storage != nullptr;
  if (!bucket.storage) bucket.storage = allocate_on_heap<float>(bucket.size);
}

// A zero-copy all-reduce needs the buffer in shared memory on every rank, so
// the ranks agree: all buckets shared everywhere, or none anywhere.
void GradientSynchronizer::agree_on_shared_buckets() {
  std::int32_t all_shared = 1;
  for (const Bucket& bucket : buckets_) {
    if (bucket.size > 0 && !bucket.shared) all_shared = 0;
  }
  group_->backend().all_reduce(std::span<std::int32_t>(&all_shared, 1), ReduceOp::Min);
  if (all_shared) return;
  for (Bucket& bucket : buckets_) {
    if (!bucket.shared) continue;
    if (compression_ == GradientCompression::BF16) {
      bucket.wire = allocate_on_heap<bfloat16>(bucket.size);
    } else {
      bucket.storage = allocate_on_heap<float>(bucket.size);
    }
    bucket.shared = false;
  }
}

void GradientSynchronizer::set_group(ProcessGroup pg) { group_ = std::move(pg); }

GradientSynchronizer::Bucket& GradientSynchronizer::open_bucket() {
  const std::size_t position = buckets_.size();
  Bucket& bucket = buckets_.emplace_back();
  bucket.position = position;
  return bucket;
}

// Appends gradient `index` to the open bucket, closing it first when the
// gradient would not fit and afterwards when it is full.
void GradientSynchronizer::place(std::size_t index, std::size_t numel) {
  if (buckets_.empty() || buckets_.back().closed) open_bucket();
  Bucket* open = &buckets_.back();
  const std::size_t capacity = capacity_of(buckets_.size() - 1);
  if (!open->indices.empty() && open->size + numel > capacity) {
    close_open_bucket();
    open = &open_bucket();
  }
  open->indices.push_back(index);
  open->offsets.push_back(open->size);
  open->size += numel;
  if (open->size >= capacity_of(buckets_.size() - 1)) close_open_bucket();
}

void GradientSynchronizer::close_open_bucket() {
  if (buckets_.empty() || buckets_.back().closed) return;
  Bucket& bucket = buckets_.back();
  bucket.closed = true;
  allocate_bucket(bucket);
}

void GradientSynchronizer::add_gradient(std::size_t index, const Tensor& gradient) {
  check_index("add_gradient", index);
  if (gradients_[index]) {
    throw InvalidArgument("GradientSynchronizer::add_gradient: gradient " + std::to_string(index) +
                          " was already added this round (sync_all() and clear() end a round)");
  }
  if (fixed_layout_ && gradient.shape() != shapes_[index]) {
    throw InvalidArgument("GradientSynchronizer::add_gradient: gradient " + std::to_string(index) +
                          " has shape " + to_string(gradient.shape()) + " but was prepared as " +
                          to_string(shapes_[index]));
  }
  if (strategy_ == GradSyncStrategy::Overlapped && !group_) {
    throw InvalidArgument("GradientSynchronizer::add_gradient: the Overlapped strategy starts "
                          "reducing while gradients arrive, so it needs the group first: call "
                          "set_group(pg) before adding");
  }
  gradients_[index] = gradient;
  if (strategy_ == GradSyncStrategy::NoSync) return;
  if (fixed_layout_) {
    --buckets_[bucket_of_[index]].missing;
  } else {
    // Place the run of consecutive arrived gradients at the top of the unplaced indices.
    while (unplaced_ > 0 && gradients_[unplaced_ - 1]) {
      --unplaced_;
      place(unplaced_, gradients_[unplaced_]->numel());
    }
    if (unplaced_ == 0) close_open_bucket();
  }
  if (strategy_ == GradSyncStrategy::Overlapped) launch_ready(false);
}

// Launches buckets in index order while the next one is complete (or, with
// `force`, all remaining ones: members never added count as zeros).
void GradientSynchronizer::launch_ready(bool force) {
  while (next_launch_ < buckets_.size()) {
    const Bucket& bucket = buckets_[next_launch_];
    if (!bucket.closed || (!force && bucket.missing > 0)) return;
    launch(next_launch_++);
  }
}

// Copy-in (or, under BF16, rounding into the twin) happens here, on the
// owner's thread; the all-reduce and the copy out run on the communication
// thread (Overlapped) or right away.
void GradientSynchronizer::launch(std::size_t b) {
  Bucket& bucket = buckets_[b];
  const bool compressed = compression_ == GradientCompression::BF16;
  for (std::size_t k = 0; k < bucket.indices.size(); ++k) {
    const auto& g = gradients_[bucket.indices[k]];
    const std::size_t offset = bucket.offsets[k];
    if (!g) {
      const std::size_t n = fixed_layout_ ? numel_of(shapes_[bucket.indices[k]]) : 0;
      if (compressed) {
        std::fill_n(bucket.wire.get() + offset, n, bfloat16{});
      } else {
        std::fill_n(bucket.storage.get() + offset, n, 0.0f);
      }
    } else if (compressed) {
      round_to_bf16(g->data().data(), bucket.wire.get() + offset, g->numel());
    } else if (g->data().data() != bucket.storage.get() + offset) {
      std::copy(g->data().begin(), g->data().end(), bucket.storage.get() + offset);
    }
  }
  if (strategy_ == GradSyncStrategy::Overlapped) {
    if (!worker_) worker_ = std::make_unique<CommWorker>();
    if (!held_) {
      if (std::shared_ptr<Backend> endpoint = group_->backend_ptr()) {
        endpoint->hold_collectives_for(worker_->thread_id(), kOverlappedHold);
        held_ = std::move(endpoint);
        held_for_ = worker_->thread_id();
      }
    }
    // The bucket itself, not its index: reading buckets_ on the worker while
    // this thread appends to it would race.
    worker_->submit([this, bucket = &buckets_[b], pg = *group_] { reduce(*bucket, pg); });
  } else {
    reduce(buckets_[b], *group_);
  }
}

// Why: buckets of equal length whose gradients differ between ranks (rank 1
// added sizes 3 and 2, the others 2 and 3) were averaged element by element
// with no error, each rank reading another gradient's values (found by a
// review). Once per bucket position and layout: a learned layout is
// relearned every round, and the same one is not compared again.
//
// The check's all_reduce has 2 + position elements, so that ranks whose
// bucket counts differ (an extra bucket, an unused gradient on one rank)
// never pair one position's check with another's, or with a data
// all-reduce: the runtime's own check fails the group then (a review: the
// ranks drifted a round apart and averaged across rounds). A rank whose
// layout changed compares again while the others, unchanged, reduce data:
// that too is the runtime's mismatch, never a silent pairing.
void GradientSynchronizer::agree_on_layout(const Bucket& bucket, const ProcessGroup& pg) {
  Fnv1a fold;  // over the bucket's (index, offset) pairs, size and wire type
  for (std::size_t k = 0; k < bucket.indices.size(); ++k) fold.add(bucket.indices[k]).add(bucket.offsets[k]);
  fold.add(bucket.size).add(compression_ == GradientCompression::BF16 ? 1 : 0);
  const std::uint64_t layout = fold.value() | 1;  // never 0, the "not yet" mark
  if (agreed_layouts_.size() <= bucket.position) agreed_layouts_.resize(bucket.position + 1, 0);
  if (agreed_layouts_[bucket.position] == layout) return;
  const auto hash = static_cast<std::int64_t>(layout >> 1);  // >= 0: its negation fits
  std::vector<std::int64_t> least(2 + bucket.position, 0);  // min, -max; the rest sizes the call
  least[0] = hash;
  least[1] = -hash;
  pg.backend().all_reduce(std::span<std::int64_t>(least), ReduceOp::Min);
  if (least[0] == -least[1]) {
    agreed_layouts_[bucket.position] = layout;
    return;
  }
  std::string mine;
  for (std::size_t k = 0; k < bucket.indices.size() && k < 8; ++k) {
    const std::size_t end = k + 1 < bucket.offsets.size() ? bucket.offsets[k + 1] : bucket.size;
    mine += (k ? ", " : "") + std::string("gradient ") + std::to_string(bucket.indices[k]) + " of " +
            std::to_string(end - bucket.offsets[k]);
  }
  if (bucket.indices.size() > 8) mine += ", ...";
  // The wire type is part of the layout: ranks that differ only in it saw
  // the same list twice and no difference (a review).
  const bool bf16 = compression_ == GradientCompression::BF16;
  throw CollectiveMismatch("GradientSynchronizer on rank " + std::to_string(pg.rank()) +
                           ": the ranks laid out a bucket differently; this rank's holds " + mine +
                           " floats, sent as " + (bf16 ? "bf16 (GradientCompression::BF16)" : "f32 (no compression)") +
                           ". Every rank must add the same indices with the same sizes, and compress alike");
}

void GradientSynchronizer::reduce(Bucket& bucket, const ProcessGroup& pg) {
  try {
    reduce_agreed(bucket, pg);
  } catch (const CollectiveMismatch& e) {
    // A rank whose layout changed after the ranks had agreed compares it
    // again while the others reduce data: the runtime's mismatch then named
    // only an all_reduce of i64 the user never called (a review). Only that
    // pairing, the check against this bucket's own data all-reduce, is
    // named so: a peer in another call altogether, or with a bucket more,
    // is another mistake, and keeps the runtime's words (a review of the
    // change saw both called a changed layout).
    const std::string check = "all_reduce(i64, " + std::to_string(2 + bucket.position) + ", min)";
    const std::string data = std::string("all_reduce(") +
                             (compression_ == GradientCompression::BF16 ? "bf16" : "f32") + ", " +
                             std::to_string(bucket.size) + ", average)";
    const std::string text = e.what();
    if (text.find(check) == std::string::npos || text.find(data) == std::string::npos) throw;
    throw CollectiveMismatch("GradientSynchronizer on rank " + std::to_string(pg.rank()) +
                             ": the ranks laid out a bucket differently in this round (bucket " +
                             std::to_string(bucket.position) + "; " + check + " is the layout check of a rank " +
                             "whose layout changed, met by a rank reducing data). Every rank must add the same " +
                             "indices with the same sizes: " + text);
  }
}

void GradientSynchronizer::reduce_agreed(Bucket& bucket, const ProcessGroup& pg) {
  agree_on_layout(bucket, pg);
  if (compression_ == GradientCompression::BF16) {
    pg.backend().all_reduce(std::span<bfloat16>(bucket.wire.get(), bucket.size), ReduceOp::Average);
    for (std::size_t k = 0; k < bucket.indices.size(); ++k) {
      auto& g = gradients_[bucket.indices[k]];
      if (g) expand_bf16(bucket.wire.get() + bucket.offsets[k], g->data().data(), g->numel());
    }
  } else {
    pg.backend().all_reduce(std::span<float>(bucket.storage.get(), bucket.size), ReduceOp::Average);
    for (std::size_t k = 0; k < bucket.indices.size(); ++k) {
      auto& g = gradients_[bucket.indices[k]];
      const float* src = bucket.storage.get() + bucket.offsets[k];
      if (g && g->data().data() != src) std::copy_n(src, g->numel(), g->data().begin());
    }
  }
  reduced_.fetch_add(1, std::memory_order_acq_rel);
}

void GradientSynchronizer::sync_all(const ProcessGroup& pg) {
  if (strategy_ == GradSyncStrategy::NoSync) return;
  // Overlapped buckets may already be reducing over group_; the rest must join them.
  if (strategy_ == GradSyncStrategy::Overlapped && group_ &&
      group_->backend_ptr() != pg.backend_ptr()) {
    // Two groups may have the same members (a new_group of every rank):
    // saying so keeps the message from reading as a contradiction.
    // (Up to any "(ranks ... of its parent ...)": the same job ranks reached
    // through other parents are the same members.)
    auto members = [](const std::string& described) { return described.substr(0, described.find(" (")); };
    const bool same_members = members(pg.describe()) == members(group_->describe());
    throw InvalidArgument("GradientSynchronizer::sync_all on rank " + std::to_string(pg.rank()) + ": " +
                          pg.describe() + " is not the group given to set_group(), " + group_->describe() +
                          (same_members ? " (another group of the same members: pass the one given to set_group())"
                                        : ""));
  }
  if (strategy_ != GradSyncStrategy::Overlapped || !group_) group_ = pg;
  if (!fixed_layout_) {
    for (std::size_t i = unplaced_; i-- > 0;) {
      if (gradients_[i]) place(i, gradients_[i]->numel());
    }
    unplaced_ = 0;
    close_open_bucket();
  }
  launch_ready(true);
  wait_for_worker();
}

void GradientSynchronizer::wait_for_worker() {
  if (!worker_) return;
  try {
    worker_->drain();
  } catch (...) {
    release_held_group();
    throw;
  }
  release_held_group();
}

void GradientSynchronizer::release_held_group() {
  if (!held_) return;
  held_->release_collectives(held_for_);
  held_.reset();
}

const std::optional<Tensor>& GradientSynchronizer::gradient(std::size_t index) const {
  check_index("gradient", index);
  return gradients_[index];
}

void GradientSynchronizer::clear() {
  wait_for_worker();
  for (auto& g : gradients_) g.reset();
  next_launch_ = 0;
  reduced_.store(0, std::memory_order_release);
  if (fixed_layout_) {
    for (Bucket& bucket : buckets_) {
      bucket.missing = bucket.indices.size();
    }
  } else {
    buckets_.clear();
    unplaced_ = gradients_.size();
  }
}

}  // namespace axonml::distributed
