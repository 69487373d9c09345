"""Fixtures shared by the Python tests."""

import pytest
import torch


@pytest.fixture
def settable_backend_flags():
    """Lets a script set torch.backends flags (`torch.backends.cudnn.benchmark = True`) as it can in a
    process of its own: importing torch.testing._internal, which other tests do, freezes them for the
    whole process. The flag is restored afterwards."""
    allow_mutation = getattr(torch.backends, "__allow_nonbracketed_mutation")
    benchmark = torch.backends.cudnn.benchmark
    with allow_mutation():
        yield
        torch.backends.cudnn.benchmark = benchmark


@pytest.fixture
def fresh_compiler():
    """Dynamo's caches and the neuron compiler's counters start empty, and Dynamo's caches are
    emptied again afterwards."""
    import trnsim.compile as tc
    torch._dynamo.reset()
    tc.reset_stats()
    yield
    torch._dynamo.reset()
