# Two commands do all the set-up on a fresh Debian 12 machine:
#   make demo   installs what is missing, builds, runs the training example on 8 ranks
#   make test   installs what is missing, builds, runs every test
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: all deps configure build demo test test-asan bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	cd $(BUILD) && ./launcher/axon-launch -n 8 ./examples/train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan:
	@$(MAKE) --no-print-directory test PRESET=asan

clean:
	rm -rf build
