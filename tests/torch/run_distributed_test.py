"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in python3-torch) against the axon backend, the
way PyTorch's test_distributed_spawn.py drives it for Gloo: each test starts
WORLD_SIZE processes that init the backend named by BACKEND. They start from
the fork server of tests/torch/harness.py, which has imported torch and the
suite once (each rank importing them itself, the subset in `make test` took
~107 s); with AXON_TEST_START_METHOD=spawn each is spawned, as
test_distributed_spawn.py does.

    # from the repository root, with <build> e.g. build/release:
    PYTHONPATH=<build>/python:tests/torch /usr/bin/python3 tests/torch/run_distributed_test.py [unittest args]

The suite gates many tests on DistTestCases.backend_feature sets; axon joins
"plugin", "ddp" and "subgroup" here (it is a CPU backend: "gpu"/"cuda" stay
Gloo's and NCCL's). Tests skipped for axon through the suite's own
DistTestCases.skip_collective sets, with the reason:
  "sendrecv anysource" (test_send_recv_any_source*): the backend has no
      receive from any source (recv names its src; the error says so).
The suite itself skips its CUDA/NCCL-only tests, and those gated on Gloo by
name (timeouts, monitored_barrier, Gloo-specific options). Five DDP tests are
skipped while torch.distributed._shard fails to import (see below).
"""
import atexit
import os
import shutil
import sys
import tempfile

# PyTorch's run_tests() writes JUnit XML through the `xmlrunner` package
# whenever the environment variable CI is set (common_utils.IS_CI), and Debian
# 12 does not package xmlrunner: under a CI system that sets CI=1 the suite
# would die at start with "No module named 'xmlrunner'". We report through
# ctest, so the suite runs as it does on a developer's machine.
os.environ.pop("CI", None)

os.environ.setdefault("BACKEND", "axon")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("INIT_METHOD", "env://")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="axon-dist-test-")
    # Made here, so removed here: every run used to leave one in /tmp. The
    # spawned ranks inherit TEMP_DIR and so never register this.
    atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], ignore_errors=True)
    os.mkdir(os.path.join(os.environ["TEMP_DIR"], "barrier"))
    os.mkdir(os.path.join(os.environ["TEMP_DIR"], "test_dir"))

import torch  # noqa: E402
import axonml_torch  # noqa: E402,F401  (registers "axon", in the spawned ranks too)
import harness  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for feature in ("plugin", "ddp", "subgroup"):
    DistTestCases.backend_feature[feature].add("axon")
DistTestCases.skip_collective["sendrecv anysource"].add("axon")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendAxon(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        harness.context(preload=("torch", "torch.distributed", "torch.testing._internal.distributed.distributed_test"))
        self._start_processes(lambda target, name, args: harness.process(target, args, name=name))


# Tests that cannot pass on Debian 12 with any backend: they import
# torch.distributed._shard, whose dataclasses PyTorch 1.13 wrote in a way
# Python 3.11 rejects ("mutable default ... TensorProperties ... use
# default_factory"; `python3 -c "import torch.distributed._shard.sharded_tensor"`
# fails the same way). Skipped only while that import fails.
def _shard_importable():
    try:
        import torch.distributed._shard.sharded_tensor  # noqa: F401
        return True
    except ValueError:
        return False


if not _shard_importable():
    import unittest
    for _name in ("test_DistributedDataParallelCPU", "test_DistributedDataParallelCPU_grad_is_view",
                  "test_ddp_create_graph", "test_ddp_logging_data_cpu", "test_static_graph_api_cpu"):
        setattr(TestDistBackendAxon, _name, unittest.skip(
            "PyTorch 1.13's torch.distributed._shard does not import under Python 3.11")(
                getattr(TestDistBackendAxon, _name)))


if __name__ == "__main__":
    run_tests()
