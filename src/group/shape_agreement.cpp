#include "group/shape_agreement.hpp"

#include <algorithm>

#include "base/hash.hpp"

namespace axonml::distributed {
namespace {

// A shape as a fixed record so that ranks can all-gather it: the number of
// dims, then up to kMaxDims sizes (more dims are folded into the last); -1
// in the first word: no shape (past the end of a rank's list).
constexpr std::size_t kMaxDims = 6;
constexpr std::size_t kRecord = kMaxDims + 1;

void encode(const Shape& shape, std::int64_t* out) {
  std::fill_n(out, kRecord, 0);
  out[0] = static_cast<std::int64_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::size_t slot = std::min(d, kMaxDims - 1);
    out[1 + slot] = slot == d ? static_cast<std::int64_t>(shape[d])
                              : out[1 + slot] * static_cast<std::int64_t>(shape[d]);
  }
}

std::string decode(const std::int64_t* record, const std::string& missing) {
  if (record[0] < 0) return missing;
  Shape shape;
  const auto dims = static_cast<std::size_t>(record[0]);
  for (std::size_t d = 0; d < std::min(dims, kMaxDims); ++d) shape.push_back(static_cast<std::size_t>(record[1 + d]));
  return to_string(shape);
}

}  // namespace

std::optional<ShapeDisagreement> find_shape_disagreement(const std::vector<Shape>& shapes, std::int64_t extra,
                                                         const ProcessGroup& pg, const std::string& missing) {
  Backend& backend = pg.backend();
  const auto n = static_cast<std::size_t>(pg.size());
  Fnv1a digest;  // over ranks and sizes of every shape
  for (const Shape& shape : shapes) {
    digest.add(shape.size());
    for (std::size_t d : shape) digest.add(d);
  }
  constexpr std::size_t kSummary = 3;
  const std::vector<std::int64_t> mine{static_cast<std::int64_t>(shapes.size()),
                                       static_cast<std::int64_t>(digest.value()), extra};
  std::vector<std::int64_t> all(kSummary * n);
  backend.all_gather<std::int64_t>(mine, all);
  auto summary_differs = [&](std::size_t r) { return !std::equal(&all[0], &all[kSummary], &all[kSummary * r]); };
  std::size_t first = 0, largest = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (first == 0 && summary_differs(r)) first = r;
    largest = std::max(largest, static_cast<std::size_t>(all[kSummary * r]));
  }
  if (first == 0) return std::nullopt;
  auto disagreement = [&](std::size_t r) {
    ShapeDisagreement d;
    d.rank = static_cast<int>(r);
    d.rank0_count = static_cast<std::size_t>(all[0]);
    d.other_count = static_cast<std::size_t>(all[kSummary * r]);
    d.rank0_extra = all[2];
    d.other_extra = all[kSummary * r + 2];
    return d;
  };
  // Lists that agree (by count and digest) need no second exchange: only
  // `extra` differs somewhere. Every rank decides alike from the same data.
  bool lists_agree = true;
  for (std::size_t r = 1; r < n; ++r) lists_agree = lists_agree && all[kSummary * r] == all[0] && all[kSummary * r + 1] == all[1];
  if (lists_agree) return disagreement(first);

  std::vector<std::int64_t> records(largest * kRecord, -1);
  for (std::size_t i = 0; i < shapes.size(); ++i) encode(shapes[i], &records[i * kRecord]);
  std::vector<std::int64_t> gathered(n * records.size());
  backend.all_gather<std::int64_t>(records, gathered);
  for (std::size_t i = 0; i < largest; ++i) {
    for (std::size_t r = 1; r < n; ++r) {
      const std::int64_t* of_rank0 = &gathered[i * kRecord];
      const std::int64_t* other = &gathered[(r * largest + i) * kRecord];
      if (std::equal(of_rank0, of_rank0 + kRecord, other)) continue;
      ShapeDisagreement d = disagreement(r);
      d.index = i;
      d.rank0_shape = decode(of_rank0, missing);
      d.other_shape = decode(other, missing);
      return d;
    }
  }
  return disagreement(first);  // the records agree, the digests did not: shapes folded alike
}

}  // namespace axonml::distributed
