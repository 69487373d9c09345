"""trnsim.cuda_compat: CUDA-only code on neuron, every redirect listed, the impossible named."""

import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import trnsim.cuda_compat as cuda_compat
from trnsim.cuda_compat import CudaCompatError, CudaCompatWarning
from trnsim.cuda_compat.cuda_module import RAISES, REDIRECTS
from trnsim.port.rules import MEMBERS, RULES

EXAMPLE = Path(__file__).parents[2] / "examples" / "cuda_script.py"


@pytest.fixture
def compat():
    cuda_compat.reset_redirected_calls()
    cuda_compat.enable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CudaCompatWarning)
            yield cuda_compat
    finally:
        cuda_compat.disable()
        cuda_compat.reset_redirected_calls()


def cpu_losses(steps: int) -> list[float]:
    """The example's training loop, on the CPU, from the example's own model and data."""
    example = runpy.run_path(str(EXAMPLE))
    model = example["build_model"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in example["batches"](steps):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_cuda_only_script_runs_on_neuron_with_cpu_losses(compat, settable_backend_flags):
    main = runpy.run_path(str(EXAMPLE))["main"]
    reference = cpu_losses(8)
    assert main(["--steps", "8"]) == pytest.approx(reference, rel=1e-5)
    with_amp = main(["--steps", "8", "--amp"])   # float16 autocast and a gradient scaler
    assert with_amp == pytest.approx(reference, rel=2e-3)
    calls = compat.redirected_calls()
    assert set(calls) == {
        "torch.cuda.is_available()", "torch.cuda.manual_seed_all()", "torch.cuda.set_device()", "Module.cuda()",
        "torch.cuda.amp.GradScaler()", "torch.cuda.Event()", "torch.cuda.nvtx.range()", "Tensor.cuda()",
        "Tensor.to('cuda')", "torch.cuda.amp.autocast()", "torch.cuda.synchronize()",
        "torch.cuda.get_device_name()", "torch.cuda.max_memory_allocated()"}
    assert calls["torch.cuda.amp.autocast()"] == 16 and calls["torch.cuda.Event()"] == 4


def test_each_redirect_is_warned_about_once(compat):
    compat.reset_redirected_calls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.cuda.synchronize()
            torch.zeros(2, device="cuda")
    messages = [str(w.message) for w in caught if w.category is CudaCompatWarning]
    assert len(messages) == 2
    assert "torch.cuda.synchronize() ran as torch.neuron.synchronize(); port it: torch.accelerator.synchronize()" \
        in messages[0]
    assert caught[0].filename == __file__     # the warning points at the user's line
    assert compat.redirected_calls() == {"torch.cuda.synchronize()": 3, "torch.zeros(device='cuda')": 3}


def test_cuda_devices_mean_neuron(compat, tmp_path):
    assert torch.cuda.is_available() and torch.cuda.device_count() == torch.neuron.device_count()
    assert torch.zeros(2, device="cuda:1").device == torch.device("neuron", 1)
    assert torch.ones(2).to(torch.device("cuda", 2)).device == torch.device("neuron", 2)
    assert torch.ones(2).cuda(3).device == torch.device("neuron", 3)
    model = torch.nn.Linear(2, 2).to("cuda")
    assert model.weight.device.type == "neuron"
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1 and torch.ones(1).cuda().device == torch.device("neuron", 1)
    torch.cuda.set_device(0)
    path = tmp_path / "t.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    loaded = torch.load(path, map_location="cuda")
    assert loaded["w"].device.type == "neuron" and loaded["w"].cpu().tolist() == [0.0, 1.0, 2.0]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("neuron")
        assert (model(torch.ones(1, 2, device="cuda"))).dtype == torch.bfloat16
    with torch.cuda.amp.autocast():
        assert torch.get_autocast_dtype("neuron") == torch.float16    # CUDA's default
    assert torch.amp.GradScaler("cuda")._device == "neuron"


def test_memory_rng_streams_events(compat):
    x = torch.ones(1024, device="cuda")
    assert torch.cuda.memory_allocated() == torch.neuron.memory_allocated() >= x.numel() * 4
    assert torch.cuda.max_memory_allocated(0) == torch.neuron.max_memory_allocated(0)
    assert torch.cuda.mem_get_info() == torch.neuron.mem_get_info()
    assert torch.cuda.get_device_properties(0).total_memory == torch.neuron.mem_get_info(0)[1]
    with pytest.raises(CudaCompatError, match="get_device_properties\\(\\).multi_processor_count"):
        torch.cuda.get_device_properties(0).multi_processor_count
    torch.cuda.manual_seed(7)
    a = torch.rand(4, device="cuda")
    torch.cuda.set_rng_state(torch.cuda.get_rng_state())
    torch.cuda.manual_seed(7)
    assert torch.equal(a.cpu(), torch.rand(4, device="cuda").cpu())
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        assert torch.cuda.current_stream() == stream
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    square = x.view(32, 32)
    (square @ square).sum()
    end.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) > 0
    assert not torch.cuda.is_current_stream_capturing()


def test_nvtx_ranges_are_profiler_ranges(compat):
    with torch.autograd.profiler.profile() as prof:
        torch.cuda.nvtx.range_push("outer")
        with torch.cuda.nvtx.range("inner"):
            torch.ones(2) + 1
        torch.cuda.nvtx.range_pop()
    names = {event.name for event in prof.function_events}
    assert {"outer", "inner"} <= names


def test_torch_internal_calls_keep_their_meaning(compat):
    compat.reset_redirected_calls()
    torch.manual_seed(0)      # calls torch.cuda.manual_seed_all internally
    assert "torch.cuda.manual_seed_all()" not in compat.redirected_calls()


def test_what_cannot_run_raises_naming_the_call(compat):
    for call, match in ((torch.cuda.CUDAGraph, "torch.cuda.CUDAGraph\\(\\): CUDA graphs"),
                        (lambda: torch.cuda.graph(None), "torch.cuda.graph\\(\\)"),
                        (lambda: torch.cuda.make_graphed_callables(None, ()), "make_graphed_callables"),
                        (torch.cuda.graphs.CUDAGraph, "torch.cuda.CUDAGraph"),
                        (torch.cuda.get_device_capability, "get_device_capability")):
        with pytest.raises(CudaCompatError, match=match):
            call()
    from torch.utils import cpp_extension
    with pytest.raises(CudaCompatError, match="load_inline\\(\\): it builds a CUDA kernel"):
        cpp_extension.load_inline("k", cpp_sources="", cuda_sources="__global__ void k() {}")
    with pytest.raises(CudaCompatError, match="load\\(\\): it builds a CUDA kernel"):
        cpp_extension.load("k", sources=["k.cpp", "k.cu"])
    with pytest.raises(CudaCompatError, match="CUDAExtension"):
        cpp_extension.CUDAExtension("k", ["k.cu"])
    if "neuron" not in torch.distributed.Backend.default_device_backend_map:
        with pytest.raises(CudaCompatError, match='init_process_group\\(backend="nccl"\\): no process-group '
                                                  'backend is registered for neuron'):
            torch.distributed.init_process_group("nccl", rank=0, world_size=1)


def test_disable_restores_torch_cuda():
    original = torch.cuda.synchronize
    cuda_compat.enable()
    cuda_compat.enable()     # idempotent
    assert torch.cuda.synchronize is not original and cuda_compat.is_enabled()
    cuda_compat.disable()
    assert torch.cuda.synchronize is original and not torch.cuda.is_available()
    assert torch.nn.Module.cuda is torch.nn.Module.__dict__["cuda"]
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")


def test_port_check_states_what_the_layer_does():
    """port-check's `compat` column and this layer agree member by member."""
    for path, entry in MEMBERS.items():
        compat = entry.compat or RULES[entry.code].compat
        if path in ("amp", "nvtx"):   # modules: their members are redirected
            assert compat == "redirected" and any(k.startswith(path + ".") for k in REDIRECTS)
        elif path == "graphs":
            assert compat == "raises"
        else:
            assert (compat == "redirected") == (path in REDIRECTS), path
            assert (compat == "raises") == (path in RAISES), path
    assert set(REDIRECTS) | set(RAISES) <= set(MEMBERS)


@pytest.mark.parametrize("first", ["torch", "trnsim.cuda_compat"])
def test_environment_variable_enables_it_at_import(first):
    code = (f"import {first}; import torch, trnsim.cuda_compat as c; x = torch.ones(2).cuda(); "
            "print(torch.cuda.is_available(), x.device, sorted(c.redirected_calls()))")
    env = {**os.environ, "TRNSIM_CUDA_COMPAT": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True neuron:0 ['Tensor.cuda()', 'torch.cuda.is_available()']"
