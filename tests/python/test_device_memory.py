"""Caching allocator over simulated HBM: exact statistics, empty_cache, OOM."""

import pytest
import torch

import trnsim.neuron  # noqa: F401

GRANULE = 512   # HBM allocation granule


def rounded(nbytes: int) -> int:
    return (nbytes + GRANULE - 1) // GRANULE * GRANULE


def test_allocated_grows_by_the_rounded_size():
    torch.neuron.empty_cache()
    base = torch.neuron.memory_allocated()
    t = torch.empty(1000, dtype=torch.float32, device="neuron")   # 4000 bytes
    assert torch.neuron.memory_allocated() - base == rounded(4000)
    assert torch.accelerator.memory_allocated(0) == torch.neuron.memory_allocated()
    del t
    assert torch.neuron.memory_allocated() == base


def test_freed_blocks_stay_reserved_until_empty_cache():
    torch.neuron.empty_cache()
    reserved = torch.neuron.memory_reserved()
    t = torch.empty(3 << 20, dtype=torch.uint8, device="neuron")
    assert torch.neuron.memory_reserved() == reserved + (3 << 20)
    del t
    assert torch.neuron.memory_reserved() == reserved + (3 << 20)
    u = torch.empty(3 << 20, dtype=torch.uint8, device="neuron")   # reuses the cached block
    assert torch.neuron.memory_reserved() == reserved + (3 << 20)
    del u
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == reserved


def test_peak_and_reset():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    t = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
    del t
    assert torch.neuron.max_memory_allocated() == base + (1 << 20)
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base


def test_memory_stats_counts_allocations():
    before = torch.neuron.memory_stats()["allocation.all.current"]
    ts = [torch.empty(10, device="neuron") for _ in range(3)]
    assert torch.neuron.memory_stats()["allocation.all.current"] == before + 3
    del ts


def test_out_of_memory_is_recoverable():
    free, total = torch.neuron.mem_get_info()
    keep = torch.arange(1000, dtype=torch.float32, device="neuron")
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(total + GRANULE, dtype=torch.uint8, device="neuron")
    message = str(info.value)
    assert "Tried to allocate" in message and "neuron:0" in message
    assert "total capacity of" in message and "allocated by PyTorch" in message
    assert "reserved by PyTorch" in message
    assert torch.neuron.memory_stats()["num_ooms"] >= 1
    # The process and existing tensors are intact; allocation still works.
    assert torch.equal(keep.cpu(), torch.arange(1000, dtype=torch.float32))
    assert torch.ones(4, device="neuron").sum().item() == 4.0


def test_pinned_memory():
    x = torch.empty(1024).pin_memory()
    assert x.is_pinned()
    assert not torch.empty(1024).is_pinned()
    x.fill_(3.0)
    assert torch.equal(x.to("neuron").cpu(), x)
