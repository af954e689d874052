// The two transports; which one is built is decided here and nowhere else.
#include "axon_bench/transport.hpp"

#include <cstdint>
#include <map>
#include <span>
#include <type_traits>
#include <stdexcept>
#include <string>

#ifdef AXON_BENCH_MPI
#include <mpi.h>
#else
#include "axonml/distributed.hpp"
#endif

namespace axon_bench {
namespace {

#ifdef AXON_BENCH_MPI

// bf16 and f16 have no MPI type: 16-bit words with a user op that widens,
// combines and rounds per pair (exact for the bench's small integers).
template <typename Half, ReduceOp kOp>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const Half*>(in);
  auto* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float r = x + y;
    if constexpr (kOp == ReduceOp::Product) r = x * y;
    if constexpr (kOp == ReduceOp::Min) r = y < x ? y : x;
    if constexpr (kOp == ReduceOp::Max) r = x < y ? y : x;
    b[i] = Half(r);
  }
}

template <typename Half> MPI_Op make_half_op(ReduceOp op) {
  MPI_User_function* fn = &half_op<Half, ReduceOp::Sum>;
  if (op == ReduceOp::Product) fn = &half_op<Half, ReduceOp::Product>;
  if (op == ReduceOp::Min) fn = &half_op<Half, ReduceOp::Min>;
  if (op == ReduceOp::Max) fn = &half_op<Half, ReduceOp::Max>;
  MPI_Op result;
  MPI_Op_create(fn, 1, &result);
  return result;
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(int& argc, char**& argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiTransport() override {
    for (auto& [key, op] : half_ops_) MPI_Op_free(&op);
    MPI_Finalize();
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // MPI has no average: sum, then scale locally as the kernels do.
  void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op) override {
    MPI_Allreduce(MPI_IN_PLACE, data, to_int(count), mpi_type(type), mpi_op(type, op), MPI_COMM_WORLD);
    if (op == ReduceOp::Average) average(data, count, type);
  }
  void broadcast(std::byte* data, std::size_t count, DataType type, int root) override {
    MPI_Bcast(data, to_int(count), mpi_type(type), root, MPI_COMM_WORLD);
  }
  void all_gather(const std::byte* send, std::byte* recv, std::size_t count, DataType type) override {
    MPI_Allgather(send, to_int(count), mpi_type(type), recv, to_int(count), mpi_type(type), MPI_COMM_WORLD);
  }
  void reduce_scatter(const std::byte* send, std::byte* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    MPI_Reduce_scatter_block(send, recv, to_int(count), mpi_type(type), mpi_op(type, op), MPI_COMM_WORLD);
    if (op == ReduceOp::Average) average(recv, count, type);
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  static int to_int(std::size_t count) {
    if (count > static_cast<std::size_t>(INT32_MAX)) throw std::invalid_argument("count exceeds MPI's int");
    return static_cast<int>(count);
  }
  static MPI_Datatype mpi_type(DataType type) {
    switch (type) {
      case DataType::F32: return MPI_FLOAT;
      case DataType::F64: return MPI_DOUBLE;
      case DataType::I32: return MPI_INT32_T;
      case DataType::I64: return MPI_INT64_T;
      case DataType::BF16:
      case DataType::F16: return MPI_UINT16_T;
    }
    return MPI_BYTE;
  }
  MPI_Op mpi_op(DataType type, ReduceOp op) {
    if (type == DataType::BF16 || type == DataType::F16) {
      const ReduceOp base = op == ReduceOp::Average ? ReduceOp::Sum : op;
      const int key = static_cast<int>(type) * 8 + static_cast<int>(base);
      auto found = half_ops_.find(key);
      if (found == half_ops_.end()) {
        const MPI_Op made = type == DataType::BF16 ? make_half_op<axonml::distributed::bfloat16>(base)
                                                   : make_half_op<axonml::distributed::float16>(base);
        found = half_ops_.emplace(key, made).first;
      }
      return found->second;
    }
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: return MPI_SUM;
      case ReduceOp::Product: return MPI_PROD;
      case ReduceOp::Min: return MPI_MIN;
      case ReduceOp::Max: return MPI_MAX;
    }
    return MPI_SUM;
  }
  template <typename T, typename Acc> void scale(std::byte* data, std::size_t count) {
    T* values = reinterpret_cast<T*>(data);
    const Acc n = static_cast<Acc>(size_);
    const Acc inverse = Acc(1) / n;
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (std::is_integral_v<Acc>) values[i] = static_cast<T>(static_cast<Acc>(values[i]) / n);
      else values[i] = static_cast<T>(static_cast<Acc>(values[i]) * inverse);
    }
  }
  void average(std::byte* data, std::size_t count, DataType type) {
    using namespace axonml::distributed;
    switch (type) {
      case DataType::F32: return scale<float, float>(data, count);
      case DataType::F64: return scale<double, double>(data, count);
      case DataType::BF16: return scale<bfloat16, float>(data, count);
      case DataType::F16: return scale<float16, float>(data, count);
      case DataType::I32: return scale<std::int32_t, std::int32_t>(data, count);
      case DataType::I64: return scale<std::int64_t, std::int64_t>(data, count);
    }
  }

  int rank_ = 0;
  int size_ = 1;
  std::map<int, MPI_Op> half_ops_;
};

#else

namespace ad = axonml::distributed;


template <typename T> std::span<T> typed(std::byte* p, std::size_t count) {
  return {reinterpret_cast<T*>(p), count};
}
template <typename T> std::span<const T> typed(const std::byte* p, std::size_t count) {
  return {reinterpret_cast<const T*>(p), count};
}

class AxonTransport final : public Transport {
 public:
  AxonTransport() : world_(ad::World::init()) {}
  std::string name() const override { return "axon/" + std::string(world_.backend().name()); }
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.world_size(); }
  std::shared_ptr<std::byte> allocate_shared(std::size_t bytes) override {
    return backend().allocate_shared(bytes);
  }

  void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op) override {
    ad::visit_element_type(type, [&]<typename T>(T) { backend().all_reduce(typed<T>(data, count), op); });
  }
  void broadcast(std::byte* data, std::size_t count, DataType type, int root) override {
    ad::visit_element_type(type, [&]<typename T>(T) { backend().broadcast(typed<T>(data, count), root); });
  }
  void all_gather(const std::byte* send, std::byte* recv, std::size_t count, DataType type) override {
    const std::size_t n = static_cast<std::size_t>(size());
    ad::visit_element_type(type, [&]<typename T>(T) {
      backend().all_gather<T>(typed<T>(send, count), typed<T>(recv, n * count));
    });
  }
  void reduce_scatter(const std::byte* send, std::byte* recv, std::size_t count, DataType type,
                      ReduceOp op) override {
    const std::size_t n = static_cast<std::size_t>(size());
    ad::visit_element_type(type, [&]<typename T>(T) {
      backend().reduce_scatter<T>(typed<T>(send, n * count), typed<T>(recv, count), op);
    });
  }
  void barrier() override { backend().barrier(); }

 private:
  ad::Backend& backend() { return world_.backend(); }
  ad::World world_;
};

#endif

}  // namespace

std::unique_ptr<Transport> make_transport([[maybe_unused]] int& argc, [[maybe_unused]] char**& argv) {
#ifdef AXON_BENCH_MPI
  return std::make_unique<MpiTransport>(argc, argv);
#else
  return std::make_unique<AxonTransport>();
#endif
}

}  // namespace axon_bench
