"""Convolutional models train on neuron with no CPU fallback: a small Hugging Face ResNet (strided
3x3 and 1x1 convolutions, batch norm, max pooling, adaptive average pooling) takes SGD steps whose
losses, parameters and running statistics match the CPU's; so does a ConvNeXt block (depthwise 7x7
convolution); a small diffusers UNet2DModel (group norm, attention, upsampling) gives the CPU's
output and gradients."""

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


class ConvNeXtBlock(torch.nn.Module):
    """A ConvNeXt block (depthwise 7x7 convolution, layer norm, MLP, residual) behind a strided stem."""

    def __init__(self, dim=32):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, dim, 4, stride=4)
        self.dwconv = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.mlp(self.norm(self.dwconv(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return self.head((x + y).mean((2, 3)))


def test_convnext_block_trains_natively_like_the_cpu():
    torch.manual_seed(0)
    cpu = ConvNeXtBlock()
    dev = copy.deepcopy(cpu).to(DEV)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)

    def run(model, x, y):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(2):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    ref = run(cpu, x, y)
    torch.neuron.reset_fallback_ops()
    got = run(dev, x.to(DEV), y.to(DEV))
    assert torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dev.dwconv.weight.detach().cpu(), cpu.dwconv.weight.detach(), atol=1e-4, rtol=1e-4)


def test_diffusers_unet_gradients_match_the_cpu_natively():
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    cpu = diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                                block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8)
    dev = copy.deepcopy(cpu).to(DEV)
    g = torch.Generator().manual_seed(3)
    x, t = torch.randn(2, 3, 16, 16, generator=g), torch.tensor([10, 500])
    ref = cpu(x, t).sample
    ref.square().mean().backward()
    torch.neuron.reset_fallback_ops()
    got = dev(x.to(DEV), t.to(DEV)).sample
    got.square().mean().backward()
    assert torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=1e-4, rtol=1e-4)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}")
