"""Random numbers on neuron come from the device's Philox generator."""

import torch

import trnsim.neuron  # noqa: F401


def test_manual_seed_determinism():
    torch.neuron.manual_seed(1234)
    a = torch.rand(100, device="neuron")
    b = torch.randn(7, 3, device="neuron")
    torch.neuron.manual_seed(1234)
    assert torch.equal(torch.rand(100, device="neuron").cpu(), a.cpu())
    assert torch.equal(torch.randn(7, 3, device="neuron").cpu(), b.cpu())


def test_device_generator_is_not_the_cpu_generator():
    torch.manual_seed(5)            # seeds every device too
    a = torch.rand(64, device="neuron").cpu()
    torch.manual_seed(5)
    torch.rand(1000)                # draws from the CPU generator only
    b = torch.rand(64, device="neuron").cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, torch.rand(64))


def test_successive_draws_differ():
    torch.neuron.manual_seed(0)
    a = torch.rand(32, device="neuron").cpu()
    b = torch.rand(32, device="neuron").cpu()
    assert not torch.equal(a, b)
    torch.neuron.seed()
    assert not torch.equal(torch.rand(32, device="neuron").cpu(), a)


def test_rng_state_round_trip():
    torch.neuron.manual_seed(99)
    torch.rand(10, device="neuron")
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    x = torch.randn(50, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(50, device="neuron").cpu(), x)
    assert torch.neuron.initial_seed() == 99


def test_distributions_have_the_right_shape_of_values():
    torch.neuron.manual_seed(7)
    u = torch.empty(20000, device="neuron").uniform_(-2, 3).cpu()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean().item() - 0.5) < 0.05
    n = torch.empty(20000, device="neuron").normal_(1.0, 2.0).cpu()
    assert abs(n.mean().item() - 1.0) < 0.1 and abs(n.std().item() - 2.0) < 0.1
    b = torch.empty(20000, device="neuron").bernoulli_(0.25).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.25) < 0.02
    r = torch.randint(3, 9, (1000,), device="neuron").cpu()
    assert r.min() >= 3 and r.max() <= 8
    p = torch.randperm(50, device="neuron").cpu()
    assert torch.equal(p.sort().values, torch.arange(50))


def test_explicit_generator_and_dropout():
    g = torch.Generator(device="neuron").manual_seed(3)
    a = torch.rand(16, device="neuron", generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.rand(16, device="neuron", generator=g).cpu(), a)
    torch.neuron.manual_seed(11)
    x = torch.ones(1000, device="neuron")
    y = torch.nn.functional.dropout(x, p=0.5, training=True).cpu()
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    assert "aten::native_dropout" not in torch.neuron.fallback_ops()
