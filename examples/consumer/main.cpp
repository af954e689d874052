// The smallest program on the installed library: every rank contributes
// rank + 1, one all_reduce_sum, and each rank checks it got 1 + 2 + ... + n.
// Run alone it is a world of one; under `axon-launch -n 2` it is two ranks.
#include <axonml/distributed.hpp>

#include <cstdio>
#include <exception>

int main() {
  using namespace axonml::distributed;
  try {
    World world = World::init();
    const int n = world.world_size();
    Tensor values = Tensor::full({5}, static_cast<float>(world.rank() + 1));
    all_reduce_sum(values, world.default_group());

    const float expected = static_cast<float>(n * (n + 1) / 2);
    bool ok = true;
    for (float v : values.data()) ok = ok && v == expected;
    std::printf("consumer: rank %d of %d: all_reduce_sum = %g (expected %g) %s\n", world.rank(), n,
                static_cast<double>(values[0]), static_cast<double>(expected),
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
