#include "torch/buffers.hpp"

#include <span>
#include <stdexcept>
#include <string>

#include "axonml/distributed/error.hpp"

namespace axonml::torch {
namespace ad = axonml::distributed;

namespace {

// A broken invariant of this file. Not TORCH_INTERNAL_ASSERT, whose message
// asks to report a bug to PyTorch (found by a review).
[[noreturn, gnu::cold]] void internal_error(const std::string& what) {
  throw std::logic_error("axonml_torch internal error (a bug in axonml-distributed, not in your program): " + what);
}

}  // namespace

std::optional<ad::DataType> native_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ad::DataType::F32;
    case at::kDouble: return ad::DataType::F64;
    case at::kBFloat16: return ad::DataType::BF16;
    case at::kHalf: return ad::DataType::F16;
    case at::kInt: return ad::DataType::I32;
    case at::kLong: return ad::DataType::I64;
    default: return std::nullopt;
  }
}

std::optional<ad::ReduceOp> native_op(const c10d::ReduceOp& op, const std::string& where) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ad::ReduceOp::Sum;
    case c10d::ReduceOp::AVG: return ad::ReduceOp::Average;
    case c10d::ReduceOp::PRODUCT: return ad::ReduceOp::Product;
    case c10d::ReduceOp::MIN: return ad::ReduceOp::Min;
    case c10d::ReduceOp::MAX: return ad::ReduceOp::Max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: return std::nullopt;
    case c10d::ReduceOp::PREMUL_SUM:  // by name: its number said nothing (a review)
      throw ad::InvalidArgument(where + ": reduce op PREMUL_SUM (NCCL's, made by _make_nccl_premul_sum) is not "
                                "supported by the axon backend (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR are); "
                                "multiply the tensor by the factor, then all_reduce with SUM");
    default:
      throw ad::InvalidArgument(where + ": reduce op " + std::to_string(static_cast<int>(op.op_)) +
                                " is not supported by the axon backend (SUM, AVG, PRODUCT, MIN, MAX, "
                                "BAND, BOR, BXOR are)");
  }
}

void check_tensor(const at::Tensor& t, const std::string& where) {
  if (!t.defined()) throw ad::InvalidArgument(where + ": undefined tensor");
  if (!t.device().is_cpu()) {
    throw ad::InvalidArgument(where + ": tensor on " + t.device().str() +
                              ", but the axon backend moves CPU tensors only");
  }
  if (t.layout() != at::kStrided) {
    throw ad::InvalidArgument(where + ": sparse or other non-strided tensors are not supported");
  }
  // Their bytes alone are not their values, and libtorch's own ops on them
  // (the padding of an odd byte count, a reduction) crashed the process or
  // failed with PyTorch's internal assert (found by a review).
  if (t.is_quantized()) {
    throw ad::InvalidArgument(where + ": quantized tensors (" + std::string(c10::toString(t.scalar_type())) +
                              ") are not supported, as by Gloo: their scale and zero point are not in the data; "
                              "move t.int_repr() and the quantization parameters, or dequantize first");
  }
}

void check_same_dtype(const at::Tensor& t, at::ScalarType type, const std::string& where) {
  if (t.scalar_type() != type) {
    throw ad::InvalidArgument(where + ": tensors of different dtypes (" +
                              std::string(c10::toString(t.scalar_type())) + " and " +
                              std::string(c10::toString(type)) + ")");
  }
}

void check_fallback(const c10d::ReduceOp& op, at::ScalarType type, const std::string& where) {
  const bool integral = at::isIntegralType(type, /*includeBool=*/true);
  if ((op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
       op.op_ == c10d::ReduceOp::BXOR) && !integral) {
    throw ad::InvalidArgument(where + ": bitwise reductions need an integer or bool tensor, not " +
                              std::string(c10::toString(type)));
  }
  // Complex AVG is the sum of the real and imaginary parts, scaled, as
  // PyTorch's all_reduce does through its real view (a review saw reduce and
  // reduce_scatter refuse what all_reduce took).
  if (op.op_ == c10d::ReduceOp::AVG && !native_type(type) && !at::isComplexType(type)) {
    throw ad::InvalidArgument(where + ": AVG is supported for Float, Double, BFloat16, Half, Int, Long "
                              "and complex tensors, not " + std::string(c10::toString(type)));
  }
  if (at::isComplexType(type) && (op.op_ == c10d::ReduceOp::MIN || op.op_ == c10d::ReduceOp::MAX)) {
    throw ad::InvalidArgument(where + ": MIN and MAX are not defined for complex tensors");
  }
}

void combine(const std::vector<at::Tensor>& parts, const c10d::ReduceOp& op, at::Tensor& out) {
  // Into `out` itself: a clone of the first part, a new tensor for every
  // MIN or MAX and a copy into `out` at the end took up to three times the
  // data's size more (a review).
  if (!out.is_contiguous() || out.numel() != parts.front().numel()) {
    internal_error("combine: the output must be contiguous and as long as each part");
  }
  at::Tensor acc = out.view(parts.front().sizes());
  acc.copy_(parts.front());
  // Complex sums part by part, through the real view, as PyTorch's
  // all_reduce hands them to the kernels: a complex add computes
  // acc + (1+0j)·x, where an infinite part makes the other NaN (a review).
  const bool complex_sum = at::isComplexType(acc.scalar_type()) &&
                           (op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG);
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const at::Tensor& x = parts[i];
    if (complex_sum) {
      at::view_as_real(acc).add_(at::view_as_real(x.contiguous()));
      continue;
    }
    switch (op.op_) {
      case c10d::ReduceOp::SUM: acc.add_(x); break;
      case c10d::ReduceOp::PRODUCT: acc.mul_(x); break;
      case c10d::ReduceOp::MIN: at::minimum_out(acc, acc, x); break;
      case c10d::ReduceOp::MAX: at::maximum_out(acc, acc, x); break;
      case c10d::ReduceOp::BAND: acc.bitwise_and_(x); break;
      case c10d::ReduceOp::BOR: acc.bitwise_or_(x); break;
      case c10d::ReduceOp::BXOR: acc.bitwise_xor_(x); break;
      default: internal_error("combine: an op native_op did not check");
    }
  }
  if (op.op_ == c10d::ReduceOp::AVG) {
    // Average = Sum × (1/n), as the runtime's kernels; complex only here
    // (check_fallback), scaled through its real view.
    if (!at::isComplexType(acc.scalar_type())) internal_error("combine: AVG of a type without a kernel");
    at::view_as_real(acc).mul_(1.0 / static_cast<double>(parts.size()));
  }
}

namespace {

// The element type data of `t` moves as: its own when the runtime knows it,
// else the widest integer whose size divides the byte count (bytes of an
// odd-sized tensor of 1-byte elements go as a padded copy, see Moved).
struct Words {
  ad::DataType type;
  std::size_t count;
};

template <typename Fn> decltype(auto) typed(ad::DataType type, Fn&& fn) {
  return ad::visit_element_type(type, std::forward<Fn>(fn));
}

template <typename T> std::span<T> span_of(const at::Tensor& t, std::size_t count) {
  return std::span<T>(static_cast<T*>(t.data_ptr()), count);
}

Words words_of(const at::Tensor& t) {
  if (auto type = native_type(t.scalar_type())) return {*type, static_cast<std::size_t>(t.numel())};
  const std::size_t bytes = t.nbytes();
  if (bytes % 8 == 0) return {ad::DataType::I64, bytes / 8};
  if (bytes % 4 == 0) return {ad::DataType::I32, bytes / 4};
  // 16-bit halves move verbatim: data movement never converts.
  if (bytes % 2 != 0) internal_error("words_of: an odd byte count not padded first");
  return {ad::DataType::F16, bytes / 2};
}

// A tensor of `blocks` equal blocks as bytes padded to an even size, for
// 1-byte dtypes with an odd element count per block.
at::Tensor padded(const at::Tensor& t, std::int64_t blocks) {
  auto bytes = t.reshape({blocks, -1}).view(at::kByte);
  return at::constant_pad_nd(bytes, {0, 1}).contiguous();
}
void unpad(const at::Tensor& staged, at::Tensor& out, std::int64_t blocks) {
  auto view = out.view({blocks, -1}).view(at::kByte);
  view.copy_(staged.view({blocks, -1}).narrow(1, 0, view.size(1)));
}
bool needs_padding(const at::Tensor& t, std::int64_t blocks) {
  return !native_type(t.scalar_type()) && (t.nbytes() / static_cast<std::size_t>(blocks)) % 2 == 1;
}

// Runs fn, the runtime's call for `user` (the tensor as the caller passed
// it). A dtype the runtime does not know moves as raw bytes, in the words
// words_of() picks, and a mismatch the runtime finds names only those words
// ("broadcast(i64, 1) vs broadcast(f16, 5)" for int16 tensors of 4 and 5
// elements; "the message has 8 bytes of f32 but the buffer has 8 bytes of i64" for a
// recv into 8 uint8): the message then also says what this rank passed.
template <typename Fn> void naming_the_dtype(const at::Tensor& user, Fn&& fn) {
  if (native_type(user.scalar_type())) return fn();
  auto passed = [&](const std::exception& e) {
    return std::string(e.what()) + " (this rank passed a " + std::string(c10::toString(user.scalar_type())) +
           " tensor of " + std::to_string(user.numel()) + " elements, " + std::to_string(user.nbytes()) +
           " bytes; tensors of a dtype the runtime does not reduce move as raw bytes, counted above in the "
           "widest words that divide their size: i64 = 8 bytes, i32 = 4, f16 = 2, after padding an odd size "
           "by one byte)";
  };
  try {
    fn();
  } catch (const ad::CollectiveMismatch& e) {
    throw ad::CollectiveMismatch(passed(e));
  } catch (const ad::InvalidArgument& e) {
    throw ad::InvalidArgument(passed(e));
  }
}

void broadcast_words(ad::Backend& b, at::Tensor& flat, int root) {
  if (needs_padding(flat, 1)) {
    auto staged = padded(flat, 1);
    broadcast_words(b, staged, root);
    return unpad(staged, flat, 1);
  }
  const Words w = words_of(flat);
  typed(w.type, [&]<typename T>(T) { b.broadcast(span_of<T>(flat, w.count), root); });
}

void all_gather_words(ad::Backend& b, const at::Tensor& send, at::Tensor& recv) {
  const std::int64_t n = b.world_size();
  if (needs_padding(send, 1)) {
    auto staged_send = padded(send, 1);
    auto staged_recv = at::empty({n * staged_send.numel()}, at::kByte);
    all_gather_words(b, staged_send, staged_recv);
    return unpad(staged_recv, recv, n);
  }
  const Words w = words_of(send);
  typed(w.type, [&]<typename T>(T) {
    b.all_gather<T>(span_of<const T>(send, w.count), span_of<T>(recv, w.count * static_cast<std::size_t>(n)));
  });
}

void gather_words(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, int root) {
  const std::int64_t n = b.world_size();
  const bool is_root = b.rank() == root;
  if (needs_padding(send, 1)) {
    auto staged_send = padded(send, 1);
    auto staged_recv = at::empty({is_root ? n * staged_send.numel() : 0}, at::kByte);
    gather_words(b, staged_send, staged_recv, root);
    if (is_root) unpad(staged_recv, recv, n);
    return;
  }
  const Words w = words_of(send);
  typed(w.type, [&]<typename T>(T) {
    b.gather<T>(span_of<const T>(send, w.count),
                span_of<T>(recv, is_root ? w.count * static_cast<std::size_t>(n) : 0), root);
  });
}

void scatter_words(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, int root) {
  const std::int64_t n = b.world_size();
  const bool is_root = b.rank() == root;
  if (needs_padding(recv, 1)) {
    auto staged_recv = at::empty({static_cast<std::int64_t>(recv.nbytes()) + 1}, at::kByte);
    auto staged_send = is_root ? padded(send, n) : at::empty({0}, at::kByte);
    scatter_words(b, staged_send, staged_recv, root);
    return unpad(staged_recv, recv, 1);
  }
  const Words w = words_of(recv);
  typed(w.type, [&]<typename T>(T) {
    b.scatter<T>(span_of<const T>(send, is_root ? w.count * static_cast<std::size_t>(n) : 0),
                 span_of<T>(recv, w.count), root);
  });
}

void all_to_all_words(ad::Backend& b, const at::Tensor& send, at::Tensor& recv) {
  const std::int64_t n = b.world_size();
  if (needs_padding(send, n)) {
    auto staged_send = padded(send, n);
    auto staged_recv = at::empty_like(staged_send);
    all_to_all_words(b, staged_send, staged_recv);
    return unpad(staged_recv, recv, n);
  }
  // Words of one block decide the type, so that every rank picks the same.
  const std::size_t block_bytes = send.nbytes() / static_cast<std::size_t>(n);
  Words w = words_of(send);
  if (!native_type(send.scalar_type()) && block_bytes % size_of(w.type) != 0) {
    w = block_bytes % 4 == 0 ? Words{ad::DataType::I32, send.nbytes() / 4}
                             : Words{ad::DataType::F16, send.nbytes() / 2};
  }
  typed(w.type, [&]<typename T>(T) {
    b.all_to_all<T>(span_of<const T>(send, w.count), span_of<T>(recv, w.count));
  });
}

}  // namespace

void all_reduce(ad::Backend& b, at::Tensor& flat, ad::ReduceOp op) {
  const Words w = words_of(flat);
  typed(w.type, [&]<typename T>(T) { b.all_reduce(span_of<T>(flat, w.count), op); });
}

void reduce(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, int root, ad::ReduceOp op) {
  const Words w = words_of(send);
  const std::size_t out = b.rank() == root ? w.count : 0;
  typed(w.type, [&]<typename T>(T) {
    b.reduce<T>(span_of<const T>(send, w.count), span_of<T>(recv, out), root, op);
  });
}

void reduce_scatter(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, ad::ReduceOp op) {
  const Words w = words_of(recv);
  const std::size_t n = static_cast<std::size_t>(b.world_size());
  typed(w.type, [&]<typename T>(T) {
    b.reduce_scatter<T>(span_of<const T>(send, w.count * n), span_of<T>(recv, w.count), op);
  });
}

void broadcast(ad::Backend& b, at::Tensor& flat, int root) {
  naming_the_dtype(flat, [&] { broadcast_words(b, flat, root); });
}

void all_gather(ad::Backend& b, const at::Tensor& send, at::Tensor& recv) {
  naming_the_dtype(send, [&] { all_gather_words(b, send, recv); });
}

void gather(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, int root) {
  naming_the_dtype(send, [&] { gather_words(b, send, recv, root); });
}

void scatter(ad::Backend& b, const at::Tensor& send, at::Tensor& recv, int root) {
  naming_the_dtype(recv, [&] { scatter_words(b, send, recv, root); });
}

void all_to_all(ad::Backend& b, const at::Tensor& send, at::Tensor& recv) {
  naming_the_dtype(send, [&] { all_to_all_words(b, send, recv); });
}

void send(ad::Backend& b, const at::Tensor& flat, int dst, int tag) {
  if (flat.nbytes() % 2 == 1) {
    auto staged = padded(flat, 1);
    return send(b, staged, dst, tag);
  }
  const Words w = words_of(flat);
  naming_the_dtype(flat, [&] { typed(w.type, [&]<typename T>(T) { b.send(span_of<T>(flat, w.count), dst, tag); }); });
}

void recv(ad::Backend& b, at::Tensor& flat, int src, int tag) {
  if (flat.nbytes() % 2 == 1) {
    auto staged = at::empty({static_cast<std::int64_t>(flat.nbytes()) + 1}, at::kByte);
    recv(b, staged, src, tag);
    return unpad(staged, flat, 1);
  }
  const Words w = words_of(flat);
  naming_the_dtype(flat, [&] { typed(w.type, [&]<typename T>(T) { b.recv(span_of<T>(flat, w.count), src, tag); }); });
}

}  // namespace axonml::torch
