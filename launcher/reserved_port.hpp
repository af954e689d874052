// ReservedPort: the TCP port a job's PyTorch rendezvous uses (MASTER_PORT),
// held by the launcher for the job's life.
//
// Rank 0's store (PyTorch's TCPStore) binds the port a second or more after
// the launcher chose it, once Python has started. A port that was merely free
// when chosen could be chosen again meanwhile by another launcher, or by any
// program that picks ports the same way, and then one of the two jobs' rank 0
// failed with EADDRINUSE (or, worse, its peers met the other job's store).
// So the launcher keeps the port bound, without listening, for as long as the
// attempt's ranks run: a bind() of it as a port picker makes one (without
// SO_REUSEADDR, on every IPv4 address or dual-stack IPv6) fails, while rank
// 0's store, which sets SO_REUSEADDR, still binds and listens there. (Linux
// lets a second socket bind a port with SO_REUSEADDR when every socket
// already bound there has it set too and none listens; the reservation binds
// without it, so that taking the port is exclusive, and sets it afterwards.)
// The cost: a rank program's own server on MASTER_PORT must set SO_REUSEADDR
// too (README). A connection to the port is refused until the store listens,
// as with no reservation at all.
//
// The port is chosen at random below the kernel's ephemeral range, where
// only an explicit bind() takes a port (an outgoing connection never does),
// where that range leaves room; otherwise the kernel picks one.
//
// Thread safety: single-threaded (the launcher's main loop).
#pragma once

namespace axon_launch {

class ReservedPort {
 public:
  // Reserves a port; port() is 0 when none could be had (then the ranks get
  // no MASTER_PORT from the launcher).
  ReservedPort();
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  int port() const { return port_; }

 private:
  int fd_ = -1;  // close-on-exec: the ranks do not inherit the reservation
  int port_ = 0;
};

}  // namespace axon_launch
