// The dispatcher: picks one kernel at first use and sends every call to it.
#include <cstdlib>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/check.hpp"
#include "base/env.hpp"
#include "kernels/reduce.hpp"
#include "kernels/reduce_isa.hpp"

namespace axonml::distributed::kernels {
namespace {

using KernelFn = void (*)(DataType, ReduceOp, std::span<const std::byte* const>, std::byte*,
                          std::size_t, std::size_t);

KernelFn kernel_of(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return &reduce_avx512;
    case Isa::Avx2: return &reduce_avx2;
    case Isa::Scalar: return &reduce_scalar;
  }
  return &reduce_scalar;
}

struct Selection {
  Isa isa;
  KernelFn kernel;
};

const Selection& selection() {
  static const Selection chosen = [] {
    const Isa isa = choose_isa();
    return Selection{isa, kernel_of(isa)};
  }();
  return chosen;
}

}  // namespace

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown-isa";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("f16c");
  }
  return false;
}

Isa choose_isa() {
  const auto requested = env::choice_any_case("AXON_KERNEL", {"scalar", "avx2", "avx512"});
  if (!requested) {
    if (isa_supported(Isa::Avx512)) return Isa::Avx512;
    if (isa_supported(Isa::Avx2)) return Isa::Avx2;
    return Isa::Scalar;
  }
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (to_string(isa) != *requested) continue;
    if (!isa_supported(isa)) {
      throw InvalidArgument("reduce kernels: AXON_KERNEL=" + *requested +
                            " but this CPU lacks the instructions it needs");
    }
    return isa;
  }
  return Isa::Scalar;  // not reached: env::choice_any_case accepted only the names above
}

void reduce_with(Isa isa, DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                 std::byte* dest, std::size_t count) {
  check::that(isa_supported(isa), "reduce_with: isa_supported(isa)");
  check::less(std::size_t{0}, sources.size(), "reduce_with: at least one source");
  kernel_of(isa)(type, op, sources, dest, 0, count);
}

void reduce(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
            std::byte* dest, std::size_t count) {
  check::less(std::size_t{0}, sources.size(), "reduce: at least one source");
  if (count <= kFewElements) return reduce_few(type, op, sources, dest, count);
  selection().kernel(type, op, sources, dest, 0, count);
}

std::string_view selected_isa() { return to_string(selection().isa); }

}  // namespace axonml::distributed::kernels
