#include "reserved_port.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

namespace axon_launch {
namespace {

// The lowest port the kernel picks on its own (for connect() without bind(),
// or bind() to port 0), or 32768, Linux's default.
int lowest_ephemeral_port() {
  int low = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  return low;
}

// Binds `fd` to `port` (0: the kernel's choice) on every IPv4 address, as
// PyTorch's TCPStore listens on all of them, not only on 127.0.0.1. Without
// SO_REUSEADDR, so that it fails while anyone else holds the port.
bool bind_any(int fd, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  return ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

int bound_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  return ntohs(address.sin_port);
}

}  // namespace

ReservedPort::ReservedPort() {
  const int low = lowest_ephemeral_port();
  const int first = std::max(1024, low - 16384), last = low - 1;
  std::random_device entropy;
  std::uniform_int_distribution<int> pick(first, std::max(first, last));
  // 64 random tries below the range where it leaves room; then (or for an
  // unusual range) the kernel's choice.
  for (int attempt = 0; attempt <= 64; ++attempt) {
    const bool kernels_choice = attempt == 64 || last - first < 1024;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    if (bind_any(fd, kernels_choice ? 0 : pick(entropy))) {
      const int yes = 1;
      const int port = bound_port(fd);
      if (port != 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) == 0) {
        fd_ = fd;
        port_ = port;
        return;
      }
    }
    ::close(fd);
    if (kernels_choice) return;
  }
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace axon_launch
