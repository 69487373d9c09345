"""Long runs and limits: memory and the kernel cache stay flat, dynamic shapes stay bounded,
out-of-memory in the middle of a step leaves every tensor intact. bench/long_run.py runs the
2,000-step version and reports the host RSS growth."""

import torch

import trnsim.neuron  # noqa: F401
from trnsim import stress


def test_training_keeps_device_memory_and_the_kernel_cache_flat():
    r = stress.long_run(steps=150, warmup=50)
    assert r["end"]["allocated"] == r["start"]["allocated"], r
    assert r["end"]["reserved"] == r["start"]["reserved"], r
    assert r["end"]["kernels"] == r["start"]["kernels"], r


def test_kernel_cache_capacity_must_be_positive():
    import pytest
    with pytest.raises(ValueError, match="at least one"):
        torch.neuron.set_kernel_cache_capacity(0)


def test_out_of_memory_mid_step_leaves_tensors_intact_and_the_next_step_runs():
    torch.neuron.empty_cache()
    model = torch.nn.Linear(256, 256).to("neuron")
    x = torch.randn(4096, 256).to("neuron")              # the step's activations need 4 MiB each
    weight, inputs = model.weight.detach().cpu().clone(), x.cpu()
    filler, chunk = [], torch.neuron.mem_get_info()[0]
    while chunk >= (1 << 20):                             # fill the device to within 1 MiB
        try:
            filler.append(torch.empty(chunk, dtype=torch.uint8, device="neuron"))
        except torch.OutOfMemoryError:
            chunk //= 2
    try:
        model(x).square().mean().backward()
        raise AssertionError("the step ran on a full device")
    except torch.OutOfMemoryError as e:
        assert "neuron out of memory" in str(e)
    assert torch.equal(model.weight.detach().cpu(), weight) and torch.equal(x.cpu(), inputs)
    del filler
    torch.neuron.empty_cache()
    model(x).square().mean().backward()
    assert model.weight.grad is not None and torch.isfinite(model.weight.grad.cpu()).all()


def test_a_new_sequence_length_every_step_keeps_the_kernel_cache_within_its_capacity():
    capacity = torch.neuron.kernel_cache_stats()["capacity"]
    torch.neuron.set_kernel_cache_capacity(24)
    try:
        torch.manual_seed(0)
        layer = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
        opt = torch.optim.SGD(layer.parameters(), lr=1e-2)
        allocated = None
        sizes = []
        for step, length in enumerate(range(40, 8, -1)):     # 32 lengths, each seen once
            x = torch.randn(2, length, 32).to("neuron")
            layer(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x
            stats = torch.neuron.kernel_cache_stats()
            sizes.append(stats["entries"])
            if step == 0:
                allocated = torch.neuron.memory_allocated()
        assert max(sizes) <= 24, sizes
        assert stats["evictions"] > 0, stats
        assert torch.neuron.memory_allocated() == allocated
    finally:
        torch.neuron.set_kernel_cache_capacity(capacity)
