#include "mpi/call_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "axonml/distributed/error.hpp"
#include "base/collective_op.hpp"
#include "base/text.hpp"

namespace axonml::distributed::mpi {
namespace {

constexpr int kTag = 1;
constexpr int kGaveUpTag = 2;  // a member's notice that it gave up a call
constexpr std::size_t kHeader = sizeof(CallDescriptor);

bool same_call(const CallDescriptor& a, const CallDescriptor& b) {
  return a.call == b.call && a.count == b.count && a.detail == b.detail && a.root == b.root &&
         a.op == b.op && a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.step == b.step;
}

// The peer of request i: receives first, then sends, each over every member
// but this one.
int peer_of(std::size_t i, int member, int size) {
  const int k = static_cast<int>(i % static_cast<std::size_t>(size - 1));
  return k < member ? k : k + 1;
}

}  // namespace

CallDescriptor describe_call(CollectiveOp op, DataType type, std::size_t count, int root,
                             const ReduceOp* reduce_op) {
  CallDescriptor d;
  d.op = static_cast<std::uint8_t>(op);
  d.dtype = static_cast<std::uint8_t>(type);
  d.count = count;
  d.root = root;
  if (reduce_op) d.reduce_op = static_cast<std::uint8_t>(*reduce_op);
  return d;
}

std::string to_string(const CallDescriptor& d) {
  if (d.step == kAfterRefusedThreadStep) {
    return call_text(d.op, d.dtype, d.count, d.reduce_op, -1, d.detail) +
           after_refused_thread_text("rank " + std::to_string(d.root));
  }
  return call_text(d.op, d.dtype, d.count, d.reduce_op, d.root, d.detail);
}

CallExchange::CallExchange(const Comm& comm, std::vector<int> world_ranks)
    : comm_(comm.get()), member_(comm.rank()), size_(comm.size()), world_ranks_(std::move(world_ranks)) {
  recv_.resize(static_cast<std::size_t>(size_) * (kHeader + kInlineBytes));
  send_offset_.resize(static_cast<std::size_t>(size_) + 1);
}

std::string CallExchange::group_name() const { return bracketed_ranks(world_ranks_); }

std::span<const std::byte> CallExchange::received(int member) const {
  const std::byte* at = recv_.data() + static_cast<std::size_t>(member) * (kHeader + kInlineBytes);
  CallDescriptor d;
  std::memcpy(&d, at, kHeader);
  return {at + kHeader, d.payload_bytes};
}

std::string CallExchange::describe_wait(std::span<const MPI_Request> requests) const {
  std::vector<int> missing;
  const std::size_t peers = static_cast<std::size_t>(size_ - 1);
  for (std::size_t i = 0; i < peers && i < requests.size(); ++i) {
    if (requests[i] != MPI_REQUEST_NULL) missing.push_back(world_rank(peer_of(i, member_, size_)));
  }
  std::string s = to_string(current_) + " call #" + std::to_string(current_.call) + " in group " +
                  group_name();
  if (missing.empty()) return s + ": sending to peers that do not receive";
  return s + ": waiting for rank(s) " + joined_ranks(missing) + " to call it";
}

void CallExchange::abandon(std::span<MPI_Request> requests) {
  bool sends_left = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    if (i < static_cast<std::size_t>(size_ - 1)) {  // a receive: cancel it cleanly
      MPI_Cancel(&requests[i]);
      MPI_Wait(&requests[i], MPI_STATUS_IGNORE);
    } else {  // a send MPI may still read: keep its buffer for good
      MPI_Request_free(&requests[i]);
      sends_left = true;
    }
  }
  if (sends_left) {
    new std::vector<std::byte>(std::move(send_));  // deliberately leaked: MPI may read it
    send_.clear();
    note_abandoned_requests();
  }
}

void CallExchange::tell_peers_gave_up(const std::string& reason) { send_notice_to_all(comm_, reason, kGaveUpTag); }

void CallExchange::fail_if_a_peer_gave_up() {
  int arrived = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kGaveUpTag, comm_, &arrived, &status) != MPI_SUCCESS || !arrived) return;
  int length = 0;
  MPI_Get_count(&status, MPI_CHAR, &length);
  std::string notice(static_cast<std::size_t>(std::max(length, 0)), '\0');
  MPI_Recv(notice.data(), length, MPI_CHAR, status.MPI_SOURCE, kGaveUpTag, comm_, MPI_STATUS_IGNORE);
  broken_ = "rank " + std::to_string(world_rank(member_)) + ": job aborted: " + notice;
  broken_by_mismatch_ = false;
  note_gave_up_waiting();  // a peer that gave up may never reach MPI_Finalize
  throw PeerFailure(broken_);
}

void CallExchange::throw_broken() const {
  if (broken_by_mismatch_) throw CollectiveMismatch(broken_);
  throw PeerFailure(broken_);
}

void CallExchange::run(CallDescriptor call,
                       const std::function<std::span<const std::byte>(int peer)>& payload, bool check,
                       const WaitContext& wait) {
  if (!broken_.empty()) throw_broken();
  call.call = calls_++;
  if (mark_next_) [[unlikely]] {
    mark_next_ = false;
    call.step = kAfterRefusedThreadStep;
    call.root = world_rank(member_);  // unlike any peer's
  }
  current_ = call;
  if (size_ == 1) return;

  // One send buffer: [header | payload] per peer, back to back.
  std::size_t total = 0;
  for (int p = 0; p < size_; ++p) {
    send_offset_[static_cast<std::size_t>(p)] = total;
    if (p != member_) total += kHeader + payload(p).size();
  }
  send_.resize(total);
  requests_.assign(2 * static_cast<std::size_t>(size_ - 1), MPI_REQUEST_NULL);
  auto check_rc = [&](int rc, int peer) {
    if (rc != MPI_SUCCESS) {
      mpi::check(rc, to_string(call), world_rank(member_),
            "exchanging call descriptors with rank " + std::to_string(world_rank(peer)));
    }
  };
  std::size_t r = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == member_) continue;
    check_rc(MPI_Irecv(recv_.data() + static_cast<std::size_t>(p) * (kHeader + kInlineBytes),
                       static_cast<int>(kHeader + kInlineBytes), MPI_BYTE, p, kTag, comm_, &requests_[r++]),
             p);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == member_) continue;
    const auto data = payload(p);
    std::byte* at = send_.data() + send_offset_[static_cast<std::size_t>(p)];
    CallDescriptor header = call;
    header.payload_bytes = static_cast<std::uint32_t>(data.size());
    std::memcpy(at, &header, kHeader);
    if (!data.empty()) std::memcpy(at + kHeader, data.data(), data.size());
    check_rc(MPI_Isend(at, static_cast<int>(kHeader + data.size()), MPI_BYTE, p, kTag, comm_,
                       &requests_[r++]),
             p);
  }
  try {
    // `wait` watches for a peer's notice that it gave up (MpiBackend sets
    // its watch to fail_if_a_peer_gave_up()), which ends the wait: a rank
    // that came too late for one call (and finished it, see below) then
    // fails its next call at once, not after a timeout of its own.
    const int rc = wait_all(requests_, wait, [this](std::span<const MPI_Request> rq) { return describe_wait(rq); });
    mpi::check(rc, to_string(call), world_rank(member_), "exchanging call descriptors in group " + group_name());
  } catch (const Error& e) {
    abandon(requests_);
    if (!broken_.empty()) throw;  // a peer's notice (fail_if_a_peer_gave_up): every peer has it already
    tell_peers_gave_up(e.what());
    broken_ = std::string("this group is unusable after: ") + e.what();
    throw;
  }
  // A peer that gave up after sending its descriptor, and told us after we
  // looked, leaves this call complete here: it moved every rank's data, but
  // the peers that gave up have thrown. This rank's next call fails then.
  fail_if_a_peer_gave_up();
  if (!check) return;
  for (int m = 0; m < size_; ++m) {
    if (m == member_) continue;
    CallDescriptor theirs;
    std::memcpy(&theirs, recv_.data() + static_cast<std::size_t>(m) * (kHeader + kInlineBytes), kHeader);
    if (same_call(theirs, call)) continue;
    std::string where = "at call #" + std::to_string(call.call);
    if (theirs.call != call.call) {
      where += " (rank " + std::to_string(world_rank(m)) + "'s call #" + std::to_string(theirs.call) + ")";
    }
    broken_by_mismatch_ = true;
    broken_ = "collective mismatch in group " + group_name() + " " + where + ": rank " +
              std::to_string(world_rank(member_)) + ": " + to_string(call) + " vs rank " +
              std::to_string(world_rank(m)) + ": " + to_string(theirs) +
              out_of_step_text(call.call, theirs.call, "rank " + std::to_string(world_rank(m)));
    throw CollectiveMismatch(broken_);
  }
}

}  // namespace axonml::distributed::mpi
