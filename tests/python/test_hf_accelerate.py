"""Hugging Face Accelerate, unmodified, on neuron: Accelerator() picks the device, prepare(),
mixed precision, save_state/load_state (the neuron generator's state included)."""

import pytest
import torch
import torch.nn.functional as F

accelerate = pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from accelerate.utils import is_neuron_available  # noqa: E402


def fresh_accelerator(**kwargs) -> Accelerator:
    AcceleratorState._reset_state(True)
    return Accelerator(**kwargs)


def data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=generator)
    dataset = torch.utils.data.TensorDataset(x, (x[:, :4] * 3).argmax(dim=1))
    return torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True,
                                       generator=torch.Generator().manual_seed(2))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def train(accelerator: Accelerator, optimizer_first: bool = False) -> dict:
    net = model()
    if optimizer_first:   # the order Accelerate's examples use
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
        net, optimizer, loader = accelerator.prepare(net, optimizer, data())
    else:
        net = accelerator.prepare(net)
        optimizer, loader = accelerator.prepare(torch.optim.AdamW(net.parameters(), lr=1e-2), data())
    dtypes, losses = set(), []
    accelerator.unwrap_model(net)[0].register_forward_hook(lambda m, i, out: dtypes.add(out.dtype))
    for _ in range(2):
        for x, y in loader:
            with accelerator.autocast():
                loss = F.cross_entropy(net(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return {"losses": losses, "dtypes": dtypes, "device": next(net.parameters()).device}


def test_accelerator_picks_neuron():
    assert is_neuron_available()
    accelerator = fresh_accelerator()
    assert accelerator.device.type == "neuron" and accelerator.distributed_type.value == "NO"


@pytest.mark.parametrize("precision,rel", [("no", 1e-5), ("bf16", 2e-3)])
def test_training_matches_cpu(precision, rel):
    cpu = train(fresh_accelerator(cpu=True, mixed_precision=precision))
    torch.neuron.reset_fallback_ops()
    neuron = train(fresh_accelerator(mixed_precision=precision))
    assert torch.neuron.fallback_ops() == {}
    assert neuron["device"].type == "neuron"
    assert neuron["dtypes"] == ({torch.bfloat16} if precision == "bf16" else {torch.float32})
    assert neuron["losses"] == pytest.approx(cpu["losses"], rel=rel)
    assert neuron["losses"][-1] < neuron["losses"][0]


def test_optimizer_built_before_prepare_trains():
    cpu = train(fresh_accelerator(cpu=True), optimizer_first=True)
    neuron = train(fresh_accelerator(), optimizer_first=True)
    assert neuron["losses"] == pytest.approx(cpu["losses"], rel=1e-5)


def test_save_and_load_state_restore_weights_and_the_device_generator(tmp_path):
    accelerator = fresh_accelerator()
    net = accelerator.prepare(model())
    torch.neuron.manual_seed(5)
    accelerator.save_state(str(tmp_path / "state"))
    weight = net[0].weight.detach().cpu().clone()
    draws = torch.rand(8, device="neuron").cpu()
    with torch.no_grad():
        net[0].weight.add_(1.0)
    accelerator.load_state(str(tmp_path / "state"))
    assert torch.equal(net[0].weight.detach().cpu(), weight)
    assert torch.equal(torch.rand(8, device="neuron").cpu(), draws)
