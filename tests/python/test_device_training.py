"""A small MLP trained on neuron matches the same training on the CPU."""

import copy

import torch

import trnsim.neuron  # noqa: F401


def train(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_losses_match_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(64, 16)
    y = torch.randint(0, 4, (64,))
    cpu_losses = train(copy.deepcopy(model), x, y, steps=10)
    dev_losses = train(copy.deepcopy(model).neuron(), x.neuron(), y.neuron(), steps=10)
    assert cpu_losses[-1] < cpu_losses[0]
    for c, d in zip(cpu_losses, dev_losses):
        assert abs(c - d) <= 1e-5 * abs(c)
