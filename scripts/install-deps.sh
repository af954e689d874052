#!/usr/bin/env bash
# Installs the Debian packages the build needs, and only those that are missing.
# Idempotent: silent and fast when everything is present.
# Extra package names as arguments are installed too (`make docs` adds
# doxygen, `make test` the PyTorch backend's packages).
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libboost-dev libtbb-dev catch2 libbenchmark-dev libcli11-dev
  libspdlog-dev libfmt-dev libopenmpi-dev openmpi-bin gnuplot-nox
  libhwloc-dev  # axon-launch --bind reads the topology
  python3   # the docs tests (tests/docs/), benchmarks/compare.sh and make bench-docs
)
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
