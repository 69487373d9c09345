"""torch.save / torch.load of neuron tensors and modules."""

import io

import torch

import trnsim.neuron  # noqa: F401


def test_tensor_round_trip_stays_on_neuron():
    x = torch.randn(3, 4, device="neuron")
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    y = torch.load(buf)
    assert y.device == x.device
    assert torch.equal(y.cpu(), x.cpu())


def test_map_location_moves_between_cpu_and_neuron():
    x = torch.randn(5, device="neuron")
    buf = io.BytesIO()
    torch.save({"x": x}, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")["x"]
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x.cpu())

    buf = io.BytesIO()
    torch.save(on_cpu, buf)
    buf.seek(0)
    back = torch.load(buf, map_location="neuron")
    assert back.device.type == "neuron" and torch.equal(back.cpu(), on_cpu)


def test_module_state_dict_round_trip():
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).neuron()
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, map_location="neuron")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).neuron()
    fresh.load_state_dict(state)
    for a, b in zip(m.parameters(), fresh.parameters()):
        assert b.device.type == "neuron" and torch.equal(a.cpu(), b.cpu())
