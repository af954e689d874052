// GradientSynchronizer: averages a model's gradients over a group in buckets.
//
// Gradients are packed into buckets in descending parameter index (the order
// backward produces them): the first bucket holds at most first_bucket_size
// floats, the others at most bucket_size; a gradient larger than its bucket
// gets a bucket of its own. The layout depends only on the gradients' indices
// and sizes, so it is the same on every rank, and buckets are reduced in the
// same order everywhere.
//
// A round: add_gradient(i, t) for each gradient (the tensor is shared, not
// copied: the averaged values land back in it), sync_all(pg) averages what is
// left and waits, gradient(i) reads the results, clear() starts the next round.
//
// Two ways to prepare:
//   prepare(n)        the layout is learned as gradients arrive;
//   prepare(shapes)   the layout is fixed now, and slot(i) is a view of
//                     the bucket storage. With a group set first, this is
//                     collective over it: the buckets go in the group's
//                     shared memory (zero-copy all-reduce) when every rank
//                     has room, else all on the heap. slot(i) is gradient
//                     i's place in its bucket. A gradient that IS its slot (a
//                     DDP parameter with gradient_as_bucket_view) is reduced
//                     in place with no copy in or out.
//
// Strategies:
//   Synchronous  every bucket is reduced inside sync_all(), on the caller.
//   Overlapped   a bucket's all-reduce starts on a communication thread as
//                soon as its last gradient is added, while the caller goes on
//                (with backward); sync_all() hands over the rest and waits.
//                The group must be known before the first add: set_group().
//                From the first bucket's launch until sync_all() (or clear())
//                returns, only the communication thread uses the group's
//                collectives: one the caller makes on that group meanwhile
//                throws InvalidArgument on the caller's rank rather than run
//                out of step with the other ranks (use another group). The
//                caller must not touch gradients it has added. An exception on that thread is rethrown by
//                sync_all(); the buckets queued after it are dropped.
//   NoSync       nothing is communicated; gradients stay local.
//
// Compression (like PyTorch's bf16_compress_hook):
//   None   buckets are all-reduced as f32.
//   BF16   each bucket also has a bf16 twin, the buffer that is all-reduced:
//          launching a bucket rounds its gradients into the twin (nearest
//          even), the backend averages the twin (summing in f32, rounding
//          once) and the result is widened back into the f32 gradients. Half
//          the bytes move; the averaged gradients carry bf16 precision (8
//          significant bits). The twin, not the f32 bucket, is what goes in
//          shared memory for the zero-copy all-reduce.
//
// Every rank must add the same indices with the same sizes: the first time a
// bucket position is reduced with a layout, the ranks compare that layout
// (one small all-reduce) and throw CollectiveMismatch, naming this rank's
// layout, when they differ.
//
// Thread safety: one owner thread; the communication thread is internal.
// buckets_reduced() may be read from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "axonml/distributed/process_group.hpp"
#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

enum class GradSyncStrategy { Synchronous, Overlapped, NoSync };

enum class GradientCompression { None, BF16 };

class CommWorker;

class GradientSynchronizer {
 public:
  // Sizes in floats; first_bucket_size 0 means bucket_size.
  GradientSynchronizer(GradSyncStrategy strategy, std::size_t bucket_size,
                       std::size_t first_bucket_size = 0,
                       GradientCompression compression = GradientCompression::None);
  // Waits for every bucket launched so far to be reduced (an error there is
  // swallowed: the group's collectives report it). Mid-step (between the
  // first launch and sync_all) ranks that ran the same backward launched
  // the same buckets, and the group stays in step; a rank that launched
  // fewer (its backward threw) leaves the others' extra buckets waiting for
  // it, so the group's next collective is a CollectiveMismatch: destroy it
  // so only on the way out.
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  GradSyncStrategy strategy() const { return strategy_; }
  std::size_t bucket_size() const { return bucket_size_; }
  std::size_t first_bucket_size() const { return first_bucket_size_; }
  GradientCompression compression() const { return compression_; }

  void prepare(std::size_t num_params);
  void prepare(const std::vector<Shape>& shapes);
  // REQUIRES: prepare(shapes). A view into the bucket storage; stable until
  // the next prepare().
  Tensor slot(std::size_t index) const;
  // The group Overlapped launches reduce over; sync_all(pg) must pass the same.
  void set_group(ProcessGroup pg);

  void add_gradient(std::size_t index, const Tensor& gradient);
  void sync_all(const ProcessGroup& pg);
  // The gradient added at `index` this round (averaged after sync_all()).
  const std::optional<Tensor>& gradient(std::size_t index) const;
  // Waits for any bucket in flight, then forgets this round's gradients.
  void clear();

  // Buckets formed so far (all of them after prepare(shapes)).
  std::size_t bucket_count() const { return buckets_.size(); }
  // Parameter indices of bucket b, in the order they were packed.
  const std::vector<std::size_t>& bucket_indices(std::size_t b) const { return buckets_.at(b).indices; }
  // Whether bucket b's all-reduce runs on a buffer in the group's shared
  // memory (zero copy): the f32 bucket, or its bf16 twin under BF16.
  bool bucket_in_shared_memory(std::size_t b) const { return buckets_.at(b).shared; }
  // Buckets whose all-reduce has finished this round, on any thread.
  std::size_t buckets_reduced() const { return reduced_.load(std::memory_order_acquire); }

 private:
  struct Bucket {
    std::vector<std::size_t> indices;  // descending
    std::vector<std::size_t> offsets;  // floats from the start of storage
    std::size_t size = 0;              // floats
    std::shared_ptr<float> storage;    // allocated when the bucket closes
    std::shared_ptr<bfloat16> wire;    // BF16 only: the twin that is all-reduced
    bool shared = false;               // the all-reduced buffer is in the group's shared memory
    std::size_t missing = 0;           // members not yet added this round
    bool closed = false;               // no more members will join
    std::size_t position = 0;          // its place in buckets_ (the order of launch)
  };

  std::size_t capacity_of(std::size_t bucket) const;
  Bucket& open_bucket();  // appends an empty bucket, its position set
  void place(std::size_t index, std::size_t numel);
  void close_open_bucket();
  void allocate_bucket(Bucket& bucket) const;
  void agree_on_shared_buckets();
  void launch_ready(bool force);
  void launch(std::size_t bucket);
  // reduce_agreed(), with a mismatch that a changed layout caused named so.
  void reduce(Bucket& bucket, const ProcessGroup& pg);
  void reduce_agreed(Bucket& bucket, const ProcessGroup& pg);
  void agree_on_layout(const Bucket& bucket, const ProcessGroup& pg);
  void wait_for_worker();
  void release_held_group();
  void check_index(const char* op, std::size_t index) const;

  GradSyncStrategy strategy_;
  std::size_t bucket_size_;
  std::size_t first_bucket_size_;
  GradientCompression compression_;
  bool place_in_shared_memory_ = false;  // only while prepare(shapes) runs
  bool fixed_layout_ = false;
  std::vector<Shape> shapes_;                   // fixed layout only
  std::vector<std::size_t> bucket_of_;          // fixed layout only
  std::vector<std::size_t> offset_in_bucket_;   // fixed layout only
  std::vector<std::optional<Tensor>> gradients_;
  // A deque: the owner's thread appends buckets while the communication
  // thread reduces earlier ones, which must not move.
  std::deque<Bucket> buckets_;
  std::size_t unplaced_ = 0;     // learned layout: indices below this are not placed yet
  std::size_t next_launch_ = 0;  // buckets launch in index order
  // The layout hash the ranks agreed on for each bucket position
  // (agree_on_layout), kept across rounds, as a learned layout is relearned
  // every round; 0: not yet. Used by the thread that reduces.
  std::vector<std::uint64_t> agreed_layouts_;
  std::optional<ProcessGroup> group_;
  std::unique_ptr<CommWorker> worker_;
  // Overlapped: the endpoint whose collectives worker_ holds from a round's
  // first launch until the worker is drained (Backend::hold_collectives_for).
  std::shared_ptr<Backend> held_;
  std::thread::id held_for_;
  std::atomic<std::size_t> reduced_{0};
};

}  // namespace axonml::distributed
