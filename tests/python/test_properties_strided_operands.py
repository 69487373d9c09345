"""Property tests: every kernel family takes operands of any layout, forward and backward.

Each operand is drawn in one of the layouts a user's tensors have: contiguous, transposed,
strided (a step), with a storage offset, expanded along one dim, broadcast along every dim
(the gradient of a sum), permuted, or empty. Results and gradients must match the CPU, or
both devices raise the same kind of error: a kernel may read a layout directly or have it
copied densely first, but never refuses it.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from property_strategies import PROPERTY_SETTINGS, make_values
from trnsim.conformance.compare import Tolerance
from trnsim.conformance.differential import assert_matches_cpu

LAYOUTS = ("contiguous", "transposed", "strided", "offset", "expanded", "broadcast", "permuted")
SEEDS = st.integers(0, 2**16)
TOL = Tolerance(atol=2e-4, rtol=2e-4)


class Operand:
    """A base tensor (what is copied to each device) and the view giving the layout."""

    def __init__(self, shape, layout, seed, dtype=torch.float32, low=-2.0, high=2.0):
        shape = tuple(shape)
        self.layout, self.shape = layout, shape
        n = len(shape)
        if layout == "transposed" and n >= 2:
            self.base = make_values(shape[:-2] + (shape[-1], shape[-2]), dtype, seed, low, high)
            self.view = lambda t: t.transpose(-1, -2)
        elif layout == "strided" and n >= 1:
            self.base = make_values(shape[:-1] + (2 * shape[-1] + 1,), dtype, seed, low, high)
            self.view = lambda t: t[..., 1::2]
        elif layout == "offset":
            count = 1
            for side in shape:
                count *= side
            self.base = make_values((count + 3,), dtype, seed, low, high)
            self.view = lambda t: t[3:].view(shape)
        elif layout == "expanded" and n >= 1:
            self.base = make_values((1,) + shape[1:], dtype, seed, low, high)
            self.view = lambda t: t.expand(shape)
        elif layout == "broadcast":
            self.base = make_values((), dtype, seed, low, high)
            self.view = lambda t: t.expand(shape)
        elif layout == "permuted" and n >= 3:
            order = list(range(n))[::-1]
            self.base = make_values(tuple(shape[i] for i in order), dtype, seed, low, high)
            self.view = lambda t: t.permute(*order)
        else:
            self.base = make_values(shape, dtype, seed, low, high)
            self.view = lambda t: t

    def __repr__(self):
        return f"Operand({self.layout}, {self.shape})"


def operand(shape, layout, seed, **kwargs):
    return Operand(shape, layout, seed, **kwargs)


def forward_and_gradients(fn, *operands):
    """fn over the operands' views, with the gradients of every float base (cotangents of a
    fixed pattern), as one function of the bases for assert_matches_cpu."""
    def run(*bases):
        leaves = [b.detach().requires_grad_(b.is_floating_point()) for b in bases]
        out = fn(*[op.view(leaf) for op, leaf in zip(operands, leaves)])
        outs = out if isinstance(out, tuple) else (out,)
        wrt = [leaf for leaf in leaves if leaf.requires_grad]
        diff = [o for o in outs if o.requires_grad]
        if not wrt or not diff:
            return outs
        cotangents = [torch.linspace(-1, 1, o.numel(), device=o.device).reshape(o.shape).to(o.dtype) for o in diff]
        grads = torch.autograd.grad(diff, wrt, cotangents, allow_unused=True)
        return outs + tuple(g if g is not None else torch.zeros_like(w) for g, w in zip(grads, wrt))
    return run


def check(fn, *operands, tolerance=TOL):
    assert_matches_cpu(forward_and_gradients(fn, *operands), *[op.base for op in operands], tolerance=tolerance)


def test_linear_backward_of_a_sum():
    """The snippet of the issue: the gradient of sum() is broadcast along both matrix dims."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 4)
    dev = torch.nn.Linear(8, 4).to("neuron")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 8)
    cpu(x).sum().backward()
    dev(x.to("neuron")).sum().backward()
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad)
    torch.testing.assert_close(dev.bias.grad.cpu(), cpu.bias.grad)


SIDE = st.integers(0, 6)
LAYOUT = st.sampled_from(LAYOUTS)


@PROPERTY_SETTINGS
@given(n=SIDE, k=SIDE, m=SIDE, la=LAYOUT, lb=LAYOUT, seed=SEEDS)
def test_mm_any_layouts(n, k, m, la, lb, seed):
    check(torch.mm, operand((n, k), la, seed), operand((k, m), lb, seed + 1))


@PROPERTY_SETTINGS
@given(b=st.integers(0, 3), n=SIDE, k=SIDE, m=SIDE, la=LAYOUT, lb=LAYOUT, lc=LAYOUT, seed=SEEDS)
def test_bmm_baddbmm_any_layouts(b, n, k, m, la, lb, lc, seed):
    check(lambda c, x, y: (torch.bmm(x, y), torch.baddbmm(c, x, y, beta=0.5)),
          operand((b, n, m), lc, seed + 2), operand((b, n, k), la, seed), operand((b, k, m), lb, seed + 1))


@PROPERTY_SETTINGS
@given(lead=st.lists(st.integers(0, 3), max_size=2), k=SIDE, m=SIDE, lx=LAYOUT, lw=LAYOUT, seed=SEEDS)
def test_linear_any_layouts(lead, k, m, lx, lw, seed):
    check(F.linear, operand(tuple(lead) + (k,), lx, seed), operand((m, k), lw, seed + 1),
          operand((m,), "contiguous", seed + 2))


@PROPERTY_SETTINGS
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple), layout=LAYOUT, seed=SEEDS,
       log=st.booleans())
def test_softmax_any_layout(shape, layout, seed, log):
    check(lambda x: (F.log_softmax if log else F.softmax)(x, dim=-1), operand(shape, layout, seed))


@PROPERTY_SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4).map(tuple), layout=LAYOUT, seed=SEEDS,
       rms=st.booleans())
def test_norms_any_layout(shape, layout, seed, rms):
    w = operand(shape[-1:], "contiguous", seed + 1)
    if rms:
        check(lambda x, w: F.rms_norm(x, shape[-1:], w), operand(shape, layout, seed), w)
    else:
        check(lambda x, w: F.layer_norm(x, shape[-1:], w), operand(shape, layout, seed), w)


@PROPERTY_SETTINGS
@given(rows=st.integers(1, 6), dim=st.integers(1, 5), lead=st.lists(st.integers(0, 4), min_size=1, max_size=2),
       lw=LAYOUT, li=LAYOUT, seed=SEEDS)
def test_embedding_any_layouts(rows, dim, lead, lw, li, seed):
    indices = operand(tuple(lead), li, seed + 1, dtype=torch.int64, low=0, high=rows)
    check(F.embedding, indices, operand((rows, dim), lw, seed))


@PROPERTY_SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3).map(tuple), layout=LAYOUT, seed=SEEDS)
def test_indexing_any_layout(shape, layout, seed):
    index = torch.arange(shape[0]).flip(0)
    gather_index = torch.zeros(shape, dtype=torch.int64)
    check(lambda x: (x.index_select(0, index.to(x.device)), x.gather(1, gather_index.to(x.device)),
                     x.masked_fill(x > 0, 0.5), torch.cat([x, x], dim=-1), torch.stack([x, x])),
          operand(shape, layout, seed))


@PROPERTY_SETTINGS
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple), la=LAYOUT, lb=LAYOUT, seed=SEEDS)
def test_pointwise_and_reductions_any_layouts(shape, la, lb, seed):
    check(lambda a, b: (a * b + a, torch.where(a > b, a, b), a.exp().clamp(max=2.0), (a - b).sum(-1),
                        a.mean(), a.var(dim=0) if shape[0] > 1 else a.sum(0)),
          operand(shape, la, seed), operand(shape, lb, seed + 1))


@PROPERTY_SETTINGS
@given(b=st.integers(1, 2), h=st.integers(1, 2), s=st.integers(1, 6), d=st.sampled_from([4, 8]),
       lq=LAYOUT, lk=LAYOUT, lv=LAYOUT, seed=SEEDS, causal=st.booleans())
def test_attention_any_layouts(b, h, s, d, lq, lk, lv, seed, causal):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
          operand((b, h, s, d), lq, seed), operand((b, h, s, d), lk, seed + 1), operand((b, h, s, d), lv, seed + 2))


@PROPERTY_SETTINGS
@given(n=st.integers(1, 2), c=st.integers(1, 3), hw=st.sampled_from([4, 6]), layout=LAYOUT, seed=SEEDS)
def test_patch_convolution_any_layout(n, c, hw, layout, seed):
    weight = operand((4, c, 2, 2), "contiguous", seed + 1)
    check(lambda x, w: F.conv2d(x, w, stride=2), operand((n, c, hw, hw), layout, seed), weight)


@PROPERTY_SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=2).map(tuple), layout=LAYOUT, seed=SEEDS)
def test_cross_entropy_any_layout(shape, layout, seed):
    target = torch.arange(shape[0]) % shape[1]
    check(lambda x: F.cross_entropy(x, target.to(x.device)), operand(shape, layout, seed))


@pytest.mark.parametrize("layout", ["transposed", "strided", "offset", "permuted"])
def test_fused_optimizers_on_strided_tensors(layout):
    """torch._fused_adamw_ / _fused_sgd_ on views: the update reaches every element."""
    def step(fused_adamw, *bases):
        ops = [Operand((3, 4, 2), layout, seed, low=0.1) for seed in range(4)]
        params, grads, avgs, sqs = [op.view(b.clone()) for op, b in zip(ops, bases)]
        if fused_adamw:
            torch._fused_adamw_([params], [grads], [avgs], [sqs], [], [torch.tensor(2.0)], lr=0.1,
                                beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
        else:
            torch._fused_sgd_([params], [grads], [avgs], weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0,
                              nesterov=False, maximize=False, is_first_step=False)
        return params, avgs, sqs

    bases = [Operand((3, 4, 2), layout, seed, low=0.1).base for seed in range(4)]
    for fused_adamw in (True, False):
        assert_matches_cpu(lambda *b: step(fused_adamw, *b), *bases, tolerance=TOL)
