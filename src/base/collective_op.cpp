#include "base/collective_op.hpp"

#include <array>
#include <mutex>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed {
namespace {

struct StepNames {
  std::mutex mutex;
  std::array<std::string, 256> names;
};

StepNames& step_names() {
  static auto* names = new StepNames;  // never destroyed: a message may be written after static destructors
  return *names;
}

}  // namespace

void name_internal_step(std::uint8_t step, std::string name) {
  StepNames& s = step_names();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.names[step] = std::move(name);
}

std::string after_refused_thread_text(const std::string& rank) {
  return " after another thread's call on this group was refused on " + rank +
         " (two threads called collectives on the group at once)";
}

std::string internal_step_text(std::uint8_t step) {
  StepNames& s = step_names();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const std::string& name = s.names[step];
  return "internal step " + std::to_string(step) + (name.empty() ? "" : ": " + name);
}

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::Broadcast: return "broadcast";
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::Gather: return "gather";
    case CollectiveOp::Scatter: return "scatter";
    case CollectiveOp::Reduce: return "reduce";
    case CollectiveOp::Barrier: return "barrier";
    case CollectiveOp::NewGroup: return "new_group";
    case CollectiveOp::AllToAll: return "all_to_all";
  }
  return "unknown-collective";
}

std::string call_text(std::uint8_t op, std::uint8_t dtype, std::uint64_t count,
                      std::uint8_t reduce_op, std::int32_t root, std::uint64_t detail,
                      std::string_view note) {
  const auto which = static_cast<CollectiveOp>(op);
  std::string s = std::string(to_string(which)) + "(";
  if (which == CollectiveOp::Barrier) return s + ")";
  if (which == CollectiveOp::NewGroup) {
    return s + std::to_string(count) + " ranks, list hash " + std::to_string(detail) + ")";
  }
  s += std::string(to_string(static_cast<DataType>(dtype))) + ", " + std::to_string(count);
  if (reduce_op != 0xff) s += ", " + std::string(to_string(static_cast<ReduceOp>(reduce_op)));
  if (root >= 0) s += ", root " + std::to_string(root);
  if (!note.empty()) s += ", " + std::string(note);
  return s + ")";
}

std::string out_of_step_text(std::uint64_t mine, std::uint64_t theirs, const std::string& peer) {
  if (mine == theirs) return {};
  const std::uint64_t ahead = mine > theirs ? mine - theirs : theirs - mine;
  const std::string who = mine > theirs ? "this rank has" : peer + " has";
  const std::string other = mine > theirs ? peer : "this rank";
  return "; the ranks are out of step: " + who + " made " + std::to_string(ahead) + " more collective" +
         (ahead == 1 ? "" : "s") + " in this group than " + other +
         " (a collective refused with an error on some ranks only still counts on them: a program that caught "
         "that error and went on is out of step with the others)";
}

}  // namespace axonml::distributed
