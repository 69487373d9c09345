"""Indexing, sorting and cumulative operators on neuron against the CPU: fp32 and bf16, odd
shapes, non-contiguous views and empty tensors, each asserting that nothing fell back to the CPU;
bad indices raise the CPU's exception and leave every tensor intact; autograd's backwards of
these operators stay native; a BERT masked-LM training step no longer falls back on them."""

import pytest
import torch

import trnsim.neuron  # noqa: F401

DEV = "neuron"
DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def randint(high, *shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


def noncontig(t):
    """The same values in a transposed storage (a non-contiguous view), for 2-D and larger."""
    return t.transpose(0, -1).contiguous().transpose(0, -1) if t.dim() >= 2 else t


def to_dev(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def check(fn, *inputs, exact=True, atol=1e-5, rtol=1e-5):
    """fn on CPU and on neuron agree (bit for bit when exact), with no CPU fallback."""
    cpu = fn(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    torch.neuron.reset_fallback_ops()
    dev = fn(*[to_dev(x) for x in inputs])
    assert torch.neuron.fallback_ops() == {}
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    dev = dev if isinstance(dev, tuple) else (dev,)
    for c, d in zip(cpu, dev):
        assert d.device.type == DEV and d.dtype == c.dtype and d.shape == c.shape
        if exact:
            torch.testing.assert_close(d.cpu(), c, atol=0, rtol=0, equal_nan=True)
        else:
            torch.testing.assert_close(d.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)


# ---- gather / scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_and_scatter_family(dtype):
    x = rand(7, 13, dtype=dtype)
    for view in (x, noncontig(x)):
        check(lambda t, i: torch.gather(t, 1, i), view, randint(13, 7, 5))
        check(lambda t, i: torch.gather(t, 0, i), view, randint(7, 3, 13))
        check(lambda t, i: torch.gather(t, -1, i), view, noncontig(randint(13, 7, 4)))
        src = rand(5, 13, dtype=dtype, seed=3)
        # Unique targets along dim 0 (a permutation per column) and repeated ones.
        perm = torch.stack([torch.randperm(7, generator=torch.Generator().manual_seed(c))[:5] for c in range(13)], 1)
        check(lambda t, i, s: t.scatter(0, i, s), view, perm, src)
        check(lambda t, i, s: t.scatter(0, i, s), view, randint(7, 5, 13), src)
        check(lambda t, i: t.scatter(1, i, 2.5), view, randint(13, 7, 3))
        sums = dict(exact=dtype == torch.float32, atol=1e-2, rtol=1e-2)
        check(lambda t, i, s: t.scatter_add(0, i, s), view, randint(7, 5, 13), src, **sums)
        check(lambda t, i, s: t.scatter_reduce(0, i, s, "sum"), view, randint(7, 5, 13), src, **sums)
        for reduce in ("sum", "mean"):
            for include_self in (True, False):
                check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), view,
                      randint(7, 5, 13), src, exact=False, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=1e-2)
        check(lambda t, i, s: t.clone().scatter_(1, i, s), view, randint(13, 5, 2), src)
    # Empty index, 1-D, and a 0-d tensor.
    check(lambda t, i: torch.gather(t, 1, i), x, torch.zeros(7, 0, dtype=torch.long))
    check(lambda t, i, s: t.scatter(0, i, s), x[0], randint(13, 20), rand(20, dtype=dtype))
    check(lambda t, i: t.scatter(0, i, -1.0), torch.tensor(3.0, dtype=dtype), torch.tensor(0))


def test_int64_values_move_exactly():
    big = torch.tensor([[2**40 + 3, -(2**35) - 7, 5, -1], [2**62, 7, -(2**62), 0]])
    idx = torch.tensor([[3, 0, 1], [2, 2, 0]])
    check(lambda t, i: torch.gather(t, 1, i), big, idx)
    check(lambda t, i: t.index_select(1, i), big, torch.tensor([1, 3]))
    check(lambda t, i, s: t.scatter(1, i, s), big, idx, big.flip(1)[:, :3].contiguous())
    check(lambda t, i: t.scatter(1, i, -5), big, idx)


# ---- index_select / index_add / index_copy / advanced indexing


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_indexing(dtype):
    x = rand(9, 6, 5, dtype=dtype)
    src = rand(4, 6, 5, dtype=dtype, seed=2)
    idx = torch.tensor([8, 0, 3, 0])   # repeats accumulate (index_add) or keep the last (index_copy)
    sums = dict(exact=dtype == torch.float32, atol=1e-2, rtol=1e-2)
    for view in (x, noncontig(x)):
        check(lambda t, i: t.index_select(0, i), view, idx)
        check(lambda t, i: t.index_select(2, i), view, torch.tensor([4, 1]))
        check(lambda t, i, s: t.index_add(0, i, s), view, idx, src, **sums)
        check(lambda t, i, s: t.index_copy(0, i, s), view, idx, src)
        check(lambda t, i: t[i], view, torch.tensor([[-1, 2], [0, -9]]))
        check(lambda t, i: t[:, i], view, torch.tensor([5, -6, 0]))

        def setitem(t, i, v):
            t = t.clone()
            t[i] = v
            return t

        def additem(t, i, v):
            t = t.clone()
            t[i] += v
            return t

        check(setitem, view, torch.tensor([1, -1, 4]), rand(3, 6, 5, dtype=dtype, seed=4))
        check(setitem, view, torch.tensor([2, 7]), rand(5, dtype=dtype, seed=5))   # broadcast value
        check(lambda t, i, v: t.index_put((i,), v, accumulate=True), view, idx, src, **sums)
        check(additem, view, torch.tensor([3, 5]), 1.5)
        check(lambda t: setitem(t, t > 0.5, -2.0), view)
        # Several index tensors on consecutive dims (broadcast together), as HF masks are read.
        i0, i1 = torch.tensor([[0], [8], [-1]]), torch.tensor([5, 0, -2, 3])
        check(lambda t, a, b: t[a, b], view, i0, i1)
        check(lambda t, a, b: t[:, a, b], view, torch.tensor([1, 5]), torch.tensor([4, -5]))
        check(lambda t, a, b, v: setitem(t, (a, b), v), view, i0, i1, rand(5, dtype=dtype, seed=7))
        check(lambda t, a, b, v: t.index_put((a, b), v, accumulate=True), view, torch.tensor([1, 1, 2]),
              torch.tensor([0, 0, 3]), rand(3, 5, dtype=dtype, seed=8), **sums)
        check(lambda t: t.masked_fill(t < 0, 7.0), view)
    check(lambda t, i: t.index_select(0, i), x, torch.zeros(0, dtype=torch.long))
    check(lambda t, i, s: t.index_add(1, i, s), x[:0], torch.tensor([1]), rand(0, 1, 5, dtype=dtype))


def test_embedding_and_backward():
    w = rand(11, 6)
    ids = torch.tensor([[1, 10, 3], [3, 3, 0]])
    check(lambda w, i: torch.nn.functional.embedding(i, w), w, ids)

    def grad(w, i):
        w = w.detach().requires_grad_()
        (torch.nn.functional.embedding(i, w, padding_idx=3) * 2).sum().backward()
        return w.grad

    check(grad, w, ids)


# ---- mask-driven: nonzero, masked_select, x[mask], masked_scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_driven(dtype):
    x = rand(5, 7, 3, dtype=dtype)
    for view in (x, noncontig(x)):
        mask = view > 0.3
        check(lambda m: torch.nonzero(m), mask)
        check(lambda t, m: t[m], view, mask)
        check(lambda t, m: t[m], view, mask[:, :, 0])   # a mask over the leading dims
        check(lambda t, m: torch.masked_select(t, m), view, mask[0])   # broadcast
        check(lambda t, m, s: t.masked_scatter(m, s), view, mask, rand(200, dtype=dtype, seed=6))
    empty = torch.zeros(4, 2, dtype=torch.bool)
    check(lambda m: torch.nonzero(m), empty)
    check(lambda t, m: t[m], x[:4, :2], empty)
    check(lambda t, m: t.masked_scatter(m, t), x, torch.zeros_like(x, dtype=torch.bool))
    big = torch.tensor([2**40 + 1, -3, 2**33])
    check(lambda t, m: t[m], big, torch.tensor([True, False, True]))


def test_masked_scatter_with_too_small_a_source_raises_like_the_cpu():
    x, m = rand(4, 3), torch.ones(4, 3, dtype=torch.bool)
    with pytest.raises(Exception) as cpu_err:
        x.clone().masked_scatter_(m, torch.ones(5))
    dx = x.to(DEV)
    with pytest.raises(Exception) as dev_err:
        dx.masked_scatter_(m.to(DEV), torch.ones(5).to(DEV))
    assert type(dev_err.value) is type(cpu_err.value)
    torch.testing.assert_close(dx.cpu(), x, atol=0, rtol=0)


# ---- sort / topk / kthvalue / median


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_and_topk(dtype):
    x = rand(6, 19, dtype=dtype)
    x[0, 3] = float("nan")
    x[1, :4] = 0.5   # ties: a stable order
    x[2, 5] = float("inf")
    x[2, 6] = float("-inf")
    for view in (x, noncontig(x)):
        check(lambda t: torch.sort(t, dim=1, stable=True), view)
        check(lambda t: torch.sort(t, dim=1, descending=True, stable=True), view)
        check(lambda t: torch.sort(t, dim=0, stable=True), view)
        check(lambda t: torch.argsort(t, dim=-1, stable=True), view)
        check(lambda t: torch.topk(t, 5, 1), view)
        check(lambda t: torch.topk(t, 3, 1, largest=False), view)
        check(lambda t: torch.topk(t, 2, 0), view)
    y = rand(4, 3, 7, dtype=dtype)
    check(lambda t: torch.kthvalue(t, 3, 2), y)
    check(lambda t: torch.kthvalue(t, 2, 1, keepdim=True), y)
    check(lambda t: torch.median(t, 2), y)
    check(lambda t: torch.median(t, 1, keepdim=True), y)
    check(lambda t: torch.median(t), y)
    z = y.clone()
    z[1, 2, 4] = float("nan")
    check(lambda t: torch.median(t, 2), z)   # the NaN of a row that has one
    check(lambda t: torch.sort(t, stable=True), rand(3, dtype=dtype))   # fewer than 8 elements
    check(lambda t: torch.topk(t, 0, 1), y[:, :, 0])
    check(lambda t: torch.sort(t, dim=1, stable=True), torch.zeros(0, 5, dtype=dtype))


# ---- cumulative


@pytest.mark.parametrize("dtype", DTYPES)
def test_cumulative(dtype):
    x = rand(5, 33, dtype=dtype)
    loose = dict(exact=False, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=1e-5 if dtype == torch.float32 else 1e-2)
    for view in (x, noncontig(x)):
        check(lambda t: torch.cumsum(t, 1), view, **loose)
        check(lambda t: torch.cumsum(t, 0), view, **loose)
        check(lambda t: torch.cumprod(t, 1), view, **loose)
        check(lambda t: t.clone().cumsum_(-1), view, **loose)
        check(lambda t: torch.prod(t, 1), view, **loose)
        check(lambda t: torch.prod(t[:, :5], 0, keepdim=True), view, **loose)
        check(lambda t: torch.prod(t[:2, :9]), view, **loose)
        check(lambda t: torch.logcumsumexp(t, 1), view, **loose)
    check(lambda t: torch.cumsum(t, 0, dtype=torch.float32), x, **loose)
    check(lambda t: torch.cumsum(t, 0), torch.zeros(0, 3, dtype=dtype))


def test_integer_cumsum_is_exact():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 1]])
    check(lambda m: m.cumsum(-1) - 1, mask)   # HF position ids from an attention mask
    check(lambda m: m.bool().cumsum(1), mask)
    check(lambda t: t.cumsum(0), torch.tensor([5, -9, 3, -100, 2]))


# ---- backwards autograd builds from these operators


@pytest.mark.parametrize("dtype", DTYPES)
def test_backwards_stay_native(dtype):
    x = rand(6, 11, dtype=dtype)

    def grad(f):
        def run(t, *rest):
            t = t.detach().requires_grad_()
            (f(t, *rest).float() ** 2).sum().backward()
            return t.grad
        return run

    exact = dict(exact=False, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=1e-5 if dtype == torch.float32 else 1e-2)
    check(grad(lambda t, i: torch.gather(t, 1, i)), x, randint(11, 6, 4), **exact)
    check(grad(lambda t: torch.sort(t, dim=1, stable=True)[0]), x, **exact)
    check(grad(lambda t: torch.topk(t, 3, 1)[0]), x, **exact)
    check(grad(lambda t, i: t[i]), x, torch.tensor([0, 5, 0]), **exact)
    check(grad(lambda t, i: t.index_select(1, i)), x, torch.tensor([2, 2, 9]), **exact)
    check(grad(lambda t: t[t > 0.2]), x, **exact)   # masked_select's backward: rows put at the mask
    check(grad(lambda t: t[t[:, 0] > 0]), x, **exact)


# ---- errors: the CPU's exception, every tensor intact


@pytest.mark.parametrize(
    "name,fn",
    [
        ("gather", lambda t, i: torch.gather(t, 1, i)),
        ("scatter_", lambda t, i: t.scatter_(1, i, torch.ones_like(t[:, :2]))),
        ("scatter_add_", lambda t, i: t.scatter_add_(1, i, torch.ones_like(t[:, :2]))),
        ("index_select", lambda t, i: t.index_select(1, i[0])),
        ("index_copy_", lambda t, i: t.index_copy_(1, i[0], torch.ones_like(t[:, :2]))),
        ("index_put_", lambda t, i: t.index_put_((i[0],), torch.tensor(1.0).to(t.device))),
    ],
)
def test_out_of_range_indices_raise_like_the_cpu(name, fn):
    x = rand(3, 4)
    idx = torch.tensor([[0, 9], [1, 2], [3, 0]])[:, :2]
    with pytest.raises(Exception) as cpu_err:
        fn(x.clone(), idx)
    dx, didx = x.to(DEV), idx.to(DEV)
    with pytest.raises(Exception) as dev_err:
        fn(dx, didx)
    assert type(dev_err.value) is type(cpu_err.value)
    torch.testing.assert_close(dx.cpu(), x, atol=0, rtol=0)
    torch.testing.assert_close(didx.cpu(), idx, atol=0, rtol=0)


# ---- a model


def test_bert_masked_lm_step_has_no_indexing_fallback():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=48, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(cfg).to(DEV)
    ids = randint(64, 2, 10).to(DEV)
    labels = ids.clone()
    labels[:, ::3] = -100
    torch.neuron.reset_fallback_ops()
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    ours = {"gather", "scatter", "scatter_add", "scatter_add_", "index_select", "index_add", "index_add_",
            "index_put_", "_index_put_impl_", "index", "embedding", "embedding_dense_backward", "cumsum", "sort",
            "topk"}
    fell_back = {name.split("::")[-1].split(".")[0] for name in torch.neuron.fallback_ops()}
    assert not fell_back & ours, torch.neuron.fallback_ops()
    assert torch.isfinite(out.loss.cpu())


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0)])
def test_masks_over_empty_tensors(shape):
    x = torch.randn(shape)
    mask = x > 0
    torch.neuron.reset_fallback_ops()
    for f in (lambda a, m: a[m], lambda a, m: m.nonzero(), torch.masked_select):
        got, expected = f(x.to("neuron"), mask.to("neuron")).cpu(), f(x, mask)
        assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.neuron.fallback_ops() == {}
