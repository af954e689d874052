// compare_params A B TOLERANCE: reads two files of one float per line (train
// --checksum-file) and fails unless they have the same count and
//   max_i |a_i - b_i| / max_j |b_j|  <=  TOLERANCE,
// the largest difference relative to the largest parameter. (Per-element
// ratios are meaningless for weights that end near zero.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace {

std::vector<double> read_values(const char* path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "compare_params: cannot read %s\n", path);
    std::exit(2);
  }
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_params A B TOLERANCE\n");
    return 2;
  }
  const auto a = read_values(argv[1]);
  const auto b = read_values(argv[2]);
  const double tolerance = std::atof(argv[3]);
  if (a.size() != b.size() || a.empty()) {
    std::fprintf(stderr, "compare_params: %zu values in %s but %zu in %s\n", a.size(), argv[1], b.size(), argv[2]);
    return 1;
  }
  double scale = 0.0, worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    if (std::abs(a[i] - b[i]) > worst) worst = std::abs(a[i] - b[i]), at = i;
  }
  const double relative = scale > 0 ? worst / scale : worst;
  std::printf("compare_params: %zu values, max relative difference %.3g (at %zu: %.9g vs %.9g), tolerance %.3g\n",
              a.size(), relative, at, a[at], b[at], tolerance);
  return relative <= tolerance ? 0 : 1;
}
