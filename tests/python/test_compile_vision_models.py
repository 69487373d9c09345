"""Vision models compiled with torch.compile(backend="neuron"): a ViT and a ConvNeXt written
as timm writes them (plain torch layers), and diffusers' DiT (a tiny config, nothing
downloaded). One training step's loss and every parameter's gradient match the eager device
step and the CPU."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from compile_checks import check_compiled_training_step  # noqa: E402


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Patch embedding (a strided convolution), class token, learned positions, pre-norm blocks."""

    def __init__(self, image=16, patch=4, dim=32, depth=2, heads=2, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, pixels, labels):
        x = self.patch_embed(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return F.cross_entropy(self.head(x[:, 0]), labels)


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1, self.act, self.pw2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(self.act(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """Patchify stem, depthwise 7x7 blocks with channels-last MLPs and layer scale, a strided
    downsampling stage, global pooling."""

    def __init__(self, dims=(16, 32), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))
        self.stage1 = ConvNeXtBlock(dims[0])
        self.down = nn.Sequential(LayerNorm2d(dims[0]), nn.Conv2d(dims[0], dims[1], 2, stride=2))
        self.stage2 = ConvNeXtBlock(dims[1])
        self.norm, self.head = nn.LayerNorm(dims[1]), nn.Linear(dims[1], classes)

    def forward(self, pixels, labels):
        x = self.stage2(self.down(self.stage1(self.stem(pixels))))
        return F.cross_entropy(self.head(self.norm(x.mean((2, 3)))), labels)


def _images(batch=2, size=16):
    return dict(pixels=torch.randn(batch, 3, size, size), labels=torch.tensor([3, 7][:batch]))


def test_vit_compiles_with_eager_gradients():
    torch.manual_seed(0)
    stats = check_compiled_training_step(ViT(), _images(), lambda loss: loss)
    assert stats["fusions"].get("attention_kernels", 0) >= 4


def test_convnext_compiles_with_eager_gradients():
    torch.manual_seed(0)
    check_compiled_training_step(ConvNeXt(), _images(), lambda loss: loss)


def test_diffusers_dit_compiles_with_eager_gradients():
    """The patch embedding's gradients included: its convolution's output reaches the
    backward graph in another layout than the one it was traced with."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                            out_channels=8, num_layers=2, sample_size=8, patch_size=2,
                                            num_embeds_ada_norm=10, norm_num_groups=1)
    inputs = dict(hidden_states=torch.randn(2, 4, 8, 8), timestep=torch.tensor([1, 5]), class_labels=torch.tensor([2, 3]))
    stats = check_compiled_training_step(model, inputs, lambda out: out.sample.square().mean())
    assert stats["fusions"].get("attention_kernels", 0) >= 4
