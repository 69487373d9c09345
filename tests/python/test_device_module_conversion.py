"""Module.to("neuron"), .to(dtype) and .cpu() keep each Parameter object, as for CUDA."""

import copy

import torch

import trnsim.neuron  # noqa: F401


def test_shallow_copy_between_cpu_and_neuron_is_compatible():
    cpu, dev = torch.ones(2), torch.ones(2, device="neuron")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert not torch._has_compatible_shallow_copy_type(dev, cpu.to_sparse())


def test_parameters_keep_their_identity_through_moves():
    model = torch.nn.Linear(4, 3)
    weight, bias = model.weight, model.bias
    model.to("neuron")
    assert model.weight is weight and weight.device.type == "neuron"
    model.to(torch.bfloat16)
    assert model.weight is weight and weight.dtype == torch.bfloat16
    model.cpu()
    assert model.weight is weight and model.bias is bias and weight.device.type == "cpu"


def test_an_optimizer_built_before_the_move_keeps_working():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randn(8, 3)
    ref = torch.nn.Linear(4, 3)
    model = copy.deepcopy(ref)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to("neuron")
    for _ in range(3):
        for m, o, a, b in ((ref, ref_opt, x, y), (model, opt, x.neuron(), y.neuron())):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(a), b).backward()
            o.step()
    torch.testing.assert_close(model.weight.cpu(), ref.weight, atol=1e-6, rtol=1e-5)


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


def test_tied_weights_stay_tied_and_train_as_on_the_cpu():
    torch.manual_seed(0)
    ids = torch.randint(0, 11, (4, 5))
    ref = TiedLM()
    model = copy.deepcopy(ref).to("neuron")
    assert model.head.weight is model.embed.weight
    losses = {}
    for name, m, i in (("cpu", ref, ids), ("neuron", model, ids.neuron())):
        opt = torch.optim.AdamW(m.parameters(), lr=0.05)
        losses[name] = []
        for _ in range(4):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(i).flatten(0, 1), i.flatten())
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    assert model.head.weight is model.embed.weight
    for c, d in zip(losses["cpu"], losses["neuron"]):
        assert abs(c - d) <= 1e-4 * abs(c)
