# Two commands do all the set-up on a fresh Debian 12 machine:
#   make demo   installs what is missing, builds, runs the training example on 8 ranks
#   make test   installs what is missing, builds, runs every test
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: all deps configure build demo test test-torch-suite test-asan bench-docs docs install clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	cd $(BUILD) && ./launcher/axon-launch -n 8 ./examples/train

# The PyTorch backend and its tests need these; `make demo` does not.
TORCH_PACKAGES := python3-torch libtorch-dev pybind11-dev python3-dev

test:
	@bash scripts/install-deps.sh $(TORCH_PACKAGES)
	@$(MAKE) --no-print-directory build
	@echo "cd $(BUILD) && ctest --output-on-failure -j $(JOBS)"
	@rm -f $(BUILD)/Testing/Temporary/LastTestsFailed.log
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) \
	  || { bash $(CURDIR)/scripts/recap-failed-tests.sh $(CURDIR)/$(BUILD); exit 1; }

# Headers, library, tools, CMake package and pkg-config file under PREFIX.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# API reference from the header comments (docs/Doxyfile); installs doxygen
# on first use, so that `make test` never needs it.
DOCS    := build/docs
VERSION := $(shell grep -m1 '^project' CMakeLists.txt | grep -o 'VERSION [0-9.]*' | cut -d' ' -f2)
docs:
	@bash scripts/install-deps.sh doxygen
	@rm -rf $(DOCS) && mkdir -p $(DOCS)
	@AXON_VERSION=$(VERSION) AXON_DOCS_DIR=$(DOCS) doxygen docs/Doxyfile \
	  || { cat $(DOCS)/warnings.log; echo "docs: doxygen failed (warnings above)"; exit 1; }
	@echo "docs: $(DOCS)/html/index.html"

# Reruns the comparison with Open MPI (benchmarks/compare.sh, twice) and
# rewrites its tables in README.md and docs/benchmarks.md, with the date, the
# machine and the commands (benchmarks/bench_docs.py). Long: run it on a
# quiet machine.
bench-docs: build
	python3 benchmarks/bench_docs.py --preset $(PRESET)

# PyTorch's whole distributed_test.py against the axon backend (long).
test-torch-suite: build
	cd tests/torch && PYTHONPATH=$(CURDIR)/$(BUILD)/python:. PYTHONWARNINGS=ignore WORLD_SIZE=2 \
	  /usr/bin/python3 run_distributed_test.py

test-asan:
	@$(MAKE) --no-print-directory test PRESET=asan

clean:
	rm -rf build
