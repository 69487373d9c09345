"""Sampling on neuron: every distribution draws from the neuron generator, the same values
per seed, with the distribution PyTorch's CPU kernels sample (checked by statistics)."""

import math

import pytest
import torch

import trnsim.neuron  # noqa: F401


def twice(fn, seed=11):
    torch.neuron.manual_seed(seed)
    a = fn()
    torch.neuron.manual_seed(seed)
    b = fn()
    assert a.device.type == "neuron"
    assert torch.equal(a.cpu(), b.cpu()), "the same seed gave different samples"
    return a.cpu()


def no_fallback(fn):
    torch.neuron.reset_fallback_ops()
    out = fn()
    assert torch.neuron.fallback_ops() == {}, torch.neuron.fallback_ops()
    return out


def test_multinomial_with_replacement_follows_the_probabilities():
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]], device="neuron")
    s = no_fallback(lambda: twice(lambda: torch.multinomial(p, 4000, replacement=True)))
    assert s.shape == (2, 4000) and s.dtype == torch.int64
    freq = torch.stack([torch.bincount(row, minlength=4) for row in s]).double() / 4000
    assert freq[0, 1] == 0                                  # never a category of mass 0
    assert torch.allclose(freq[0], torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.double), atol=0.03)
    assert torch.allclose(freq[1], torch.full((4,), 0.25, dtype=torch.double), atol=0.03)


def test_multinomial_without_replacement_draws_distinct_categories():
    p = torch.tensor([0.5, 0.2, 0.0, 0.2, 0.1], device="neuron")
    s = twice(lambda: torch.multinomial(p, 4))
    assert sorted(s.tolist()) == [0, 1, 3, 4]
    # The first draw follows p; a 1-D input gives a 1-D result.
    firsts = torch.stack([torch.multinomial(p, 1) for _ in range(2000)]).cpu().flatten()
    freq = torch.bincount(firsts, minlength=5).double() / 2000
    assert torch.allclose(freq, p.cpu().double(), atol=0.04)


def test_multinomial_rejects_what_the_cpu_rejects():
    for bad, message in ((torch.tensor([0.5, -0.1]), "element < 0"), (torch.zeros(3), "sum of probabilities"),
                         (torch.tensor([1.0, float("nan")]), "nan")):
        for device in ("cpu", "neuron"):
            with pytest.raises(RuntimeError, match=message):
                torch.multinomial(bad.to(device), 1)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(torch.ones(3, device="neuron"), 4)


@pytest.mark.parametrize("name,draw,mean,var", [
    ("exponential", lambda t: t.exponential_(2.0), 0.5, 0.25),
    ("geometric", lambda t: t.geometric_(0.25), 4.0, 12.0),
    ("log_normal", lambda t: t.log_normal_(0.5, 0.25), math.exp(0.5 + 0.25 ** 2 / 2),
     (math.exp(0.25 ** 2) - 1) * math.exp(1 + 0.25 ** 2)),
    ("uniform", lambda t: t.uniform_(-1, 3), 1.0, 16 / 12),
    ("normal", lambda t: t.normal_(2.0, 0.5), 2.0, 0.25),
    ("bernoulli_tensor_p", lambda t: t.bernoulli_(torch.full_like(t, 0.3)), 0.3, 0.21),
])
def test_elementwise_distributions(name, draw, mean, var):
    x = no_fallback(lambda: twice(lambda: draw(torch.empty(20000, device="neuron"))))
    assert abs(x.mean().item() - mean) < 4 * math.sqrt(var / x.numel())
    assert abs(x.var().item() - var) < 0.1 * var
    if name == "geometric":
        assert x.min() >= 1 and torch.equal(x, x.round())


def test_cauchy_median_and_quartiles():
    x = twice(lambda: torch.empty(20000, device="neuron").cauchy_(1.0, 2.0))
    q = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75]))
    assert torch.allclose(q, torch.tensor([-1.0, 1.0, 3.0]), atol=0.15)


def test_randint_randperm_and_tensor_normal():
    r = no_fallback(lambda: twice(lambda: torch.randint(3, 9, (5000,), device="neuron")))
    assert r.min() == 3 and r.max() == 8
    perm = twice(lambda: torch.randperm(50, device="neuron"))
    assert sorted(perm.tolist()) == list(range(50))
    mean = torch.arange(4.0, device="neuron").repeat(5000)
    std = torch.full((20000,), 0.5, device="neuron")
    n = no_fallback(lambda: twice(lambda: torch.normal(mean, std)))
    assert torch.allclose(n.view(5000, 4).mean(0), torch.arange(4.0), atol=0.03)
    out = torch.empty(0, device="neuron")
    torch.normal(mean, std, out=out)
    assert out.shape == (20000,)


def test_poisson_and_rrelu():
    rates = torch.tensor([0.0, 1.0, 4.0, 30.0], device="neuron").repeat(4000)
    s = twice(lambda: torch.poisson(rates)).view(4000, 4)
    assert torch.allclose(s.mean(0), torch.tensor([0.0, 1.0, 4.0, 30.0]), rtol=0.05, atol=0.05)
    x = torch.linspace(-2, 2, 1000, device="neuron")
    y = twice(lambda: torch.nn.functional.rrelu(x, 0.1, 0.3, training=True))
    neg = x.cpu() < 0
    slope = y[neg] / x.cpu()[neg]
    assert slope.min() >= 0.1 and slope.max() <= 0.3 and torch.equal(y[~neg], x.cpu()[~neg])
    torch.testing.assert_close(torch.nn.functional.rrelu(x, 0.1, 0.3).cpu(),
                               torch.nn.functional.rrelu(x.cpu(), 0.1, 0.3))


def test_every_random_operator_reaching_the_device_has_a_kernel_or_a_clear_error():
    """Operators with a Generator argument and a CPU kernel either have a neuron kernel or,
    through the fallback, raise NotImplementedError naming the generator (never CPU draws)."""
    covered = []
    C = torch._C
    for full in C._dispatch_get_all_op_names():
        if not full.startswith("aten::") or not C._dispatch_has_kernel_for_dispatch_key(full, "CPU"):
            continue
        name, _, overload = full.partition(".")
        schema = C._get_schema(name, overload)
        if any("Generator" in str(a.type) for a in schema.arguments) and \
                C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1"):
            covered.append(full)
    for op in ("aten::multinomial", "aten::geometric_", "aten::log_normal_", "aten::cauchy_", "aten::poisson",
               "aten::normal.Tensor_Tensor_out", "aten::rrelu_with_noise", "aten::bernoulli_.Tensor",
               "aten::exponential_", "aten::random_.from", "aten::randperm.generator_out"):
        assert op in covered, op
    with pytest.raises(NotImplementedError, match="generator"):
        torch._standard_gamma(torch.ones(3, device="neuron"))


def hf_sampling_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_hf_generate_with_sampling_is_reproducible_per_seed():
    model = hf_sampling_model().to("neuron")
    ids = torch.tensor([[1, 5, 9, 3]], device="neuron")

    def generate(seed):
        torch.neuron.manual_seed(seed)
        return model.generate(ids, do_sample=True, top_k=20, top_p=0.9, temperature=0.8, max_new_tokens=8,
                              pad_token_id=0).cpu()

    a, b, c = generate(3), generate(3), generate(4)
    assert a.shape == (1, 12) and torch.equal(a, b)
    assert not torch.equal(a, c) or not torch.equal(generate(5), a)
    assert int(a.max()) < 64
