"""Convolutional models from third-party code train on neuron with no CPU fallback: a small
Hugging Face ResNet (strided 3x3 and 1x1 convolutions, batch norm, max pooling, adaptive average
pooling) takes SGD steps whose losses, gradients and running statistics match the CPU's."""

import copy

import pytest
import torch

import trnsim.neuron  # noqa: F401

transformers = pytest.importorskip("transformers")

DEV = "neuron"


def small_resnet(layer_type):
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                    layer_type=layer_type, num_labels=10, downsample_in_first_stage=False)
    torch.manual_seed(0)
    return transformers.ResNetForImageClassification(cfg)


def train(model, x, y, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(pixel_values=x, labels=y).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("layer_type", ["basic", "bottleneck"])
def test_hf_resnet_trains_natively_like_the_cpu(layer_type):
    cpu = small_resnet(layer_type)
    dev = copy.deepcopy(cpu).to(DEV)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
    ref = train(cpu, x, y)
    torch.neuron.reset_fallback_ops()
    got = train(dev, x.to(DEV), y.to(DEV))
    assert torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), atol=1e-4, rtol=1e-4)
    for (name, p), (_, q) in zip(cpu.state_dict().items(), dev.state_dict().items()):
        if p.is_floating_point():
            torch.testing.assert_close(q.cpu(), p, atol=2e-4, rtol=2e-3, msg=lambda m: f"{name}: {m}")
    cpu.eval()
    dev.eval()
    with torch.no_grad():
        torch.testing.assert_close(dev(pixel_values=x.to(DEV)).logits.cpu(), cpu(pixel_values=x).logits,
                                   atol=1e-4, rtol=1e-4)
