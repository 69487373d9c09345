"""PyTorch's own c10d tests (torch.testing._internal.distributed.distributed_test, the tests of
torch's test/distributed/test_distributed_spawn.py) on the neuron backend, where they apply to a
custom backend: the collective tests on device tensors (the ``*_cuda`` tests), run with
trnsim.cuda_compat (``.cuda()`` means neuron, backend "nccl" means the neuron backend).

Run under torchrun with 2 ranks, with BACKEND=nccl, TRNSIM_CUDA_COMPAT=1 and TEMP_DIR (a shared
directory) in the environment. All tests run in one process group, one after the other, as
PyTorch's runner would run them in fresh ones. argv[1:]: test names. Prints "RESULT <test>
<pass|skip|fail> <detail>" per test, and "DONE".
"""

import os
import sys
import traceback
import unittest

import torch
import torch.distributed as dist

for sub in ("barrier", "test_dir", "init_dir"):
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], sub), exist_ok=True)

import torch.testing._internal.common_distributed as common_distributed  # noqa: E402
from torch.testing._internal.common_distributed import TEST_SKIPS  # noqa: E402

# torch's tests are user code here: their torch.cuda calls run on neuron as a user's would
# (trnsim.cuda_compat leaves the calls of PyTorch's own modules alone), and the helpers that
# decided at import whether CUDA is there see the neuron devices.
import trnsim.cuda_compat.cuda_module as cuda_module  # noqa: E402


def _from_torch_itself(depth: int = 2) -> bool:
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return (name == "torch" or name.startswith("torch.")) and not name.startswith("torch.testing.")


cuda_module.from_torch = _from_torch_itself
common_distributed.TEST_CUDA = torch.cuda.is_available()
from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.testing._internal.distributed.distributed_test import Barrier, DistributedTest  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group(os.environ["BACKEND"])
assert dist.get_backend() == "neuron", dist.get_backend()     # "nccl" means the neuron backend
SKIP_CODES = {s.exit_code: name for name, s in TEST_SKIPS.items()}


class Suite(DistributedTest._DistTestBase, TestCase):
    rank, world_size = rank, world


def run(name: str) -> tuple[str, str]:
    test = Suite(name)
    result = unittest.TestResult()
    try:
        test.run(result)
    except SystemExit as e:        # torch's skip decorators exit the spawned process with a code
        return "skip", SKIP_CODES.get(e.code, f"exit {e.code}")
    if result.skipped:
        return "skip", result.skipped[0][1].splitlines()[0]
    problems = result.failures + result.errors
    exit_code = problems[0][1].strip().splitlines()[-1].removeprefix("SystemExit: ") if problems else ""
    if exit_code.isdigit() and int(exit_code) in SKIP_CODES:   # torch's skip decorators exit with a code
        return "skip", SKIP_CODES[int(exit_code)]
    if problems:
        print(problems[0][1], file=sys.stderr)
        return "fail", problems[0][1].strip().splitlines()[-1]
    return "pass", ""


Barrier.init() if rank == 0 else None
dist.barrier()
for name in sys.argv[1:]:
    try:
        status, detail = run(name)
    except Exception:   # noqa: BLE001  (reported, the other tests still run)
        status, detail = "fail", traceback.format_exc().strip().splitlines()[-1]
    print(f"RESULT {name} {status} {detail}\n", end="", flush=True)
    dist.barrier()
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
