"""Decode attention on neuron: scaled_dot_product_attention with few query rows per k/v head
runs on the flash-decoding kernel (each k/v head read once for the query heads sharing it, the
context split into passes and combined) and matches the CPU; the paged-cache operator
torch.ops.trnsim.paged_attention_decode matches attention over the gathered cache; Hugging Face
Llama generate() with a static and a dynamic cache gives the CPU's greedy tokens through it."""

import os

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401
from trnsim import _C


def launched(fn):
    """fn()'s result and the names of the programs it launched."""
    _C._set_launch_trace(True)
    try:
        out = fn()
    finally:
        _C._set_launch_trace(False)
    return out, [t[0] for t in _C._take_launch_trace()]


def sdpa_both(q, k, v, mask=None, **kwargs):
    cpu = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         attn_mask=None if mask is None else (mask if mask.dtype == torch.bool
                                                                              else mask.float()), **kwargs)
    dev, names = launched(lambda: F.scaled_dot_product_attention(
        q.to("neuron"), k.to("neuron"), v.to("neuron"), attn_mask=None if mask is None else mask.to("neuron"),
        **kwargs).cpu())
    assert any(n.startswith("sdpa_decode") for n in names), names
    return cpu, dev


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_grouped_query_decode_over_several_passes_matches_cpu(dtype, tol):
    torch.manual_seed(0)
    # 1100 keys: two full passes of 512 and a ragged one; 8 query heads share 2 k/v heads.
    q, k, v = (torch.randn(2, 8, 1, 64, dtype=dtype), torch.randn(2, 2, 1100, 64, dtype=dtype),
               torch.randn(2, 2, 1100, 64, dtype=dtype))
    cpu, dev = sdpa_both(q, k, v, enable_gqa=True)
    assert dev.dtype == dtype and dev.shape == (2, 8, 1, 64)
    torch.testing.assert_close(dev.float(), cpu, atol=tol, rtol=tol)


def test_packed_queries_with_a_static_cache_mask():
    # Hugging Face's decode with a mask: the query heads of a k/v head packed as its query rows
    # ([B, Hkv, G, D]) and a [B, 1, 1, max_cache_len] boolean mask of the filled positions.
    torch.manual_seed(1)
    B, Hkv, G, S, D = 3, 4, 4, 700, 32
    q, k, v = torch.randn(B, Hkv, G, D), torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    lengths = torch.tensor([1, 513, 0])
    mask = (torch.arange(S)[None, :] < lengths[:, None]).view(B, 1, 1, S)
    cpu, dev = sdpa_both(q, k, v, mask)
    torch.testing.assert_close(dev[:2], cpu[:2], atol=2e-5, rtol=2e-5)
    assert torch.equal(dev[2], torch.zeros(Hkv, G, D))   # sequence 2 sees no key: zeros, as the fused path


def test_additive_mask_per_head_and_a_scale():
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 6, 3, 16), torch.randn(2, 6, 40, 16), torch.randn(2, 6, 40, 24)
    mask = torch.randn(2, 6, 3, 40)
    cpu, dev = sdpa_both(q, k, v, mask, scale=0.2)
    torch.testing.assert_close(dev, cpu, atol=2e-5, rtol=2e-5)


def test_decode_forward_gives_the_backward_its_logsumexp():
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 600, 8), torch.randn(1, 2, 600, 8)

    def grads(device):
        leaves = [t.clone().to(device).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves)
        return [g.cpu() for g in torch.autograd.grad(out, leaves, torch.ones_like(out))]

    (dev), names = launched(lambda: grads("neuron"))
    assert any(n.startswith("sdpa_decode") for n in names)
    for c, d in zip(grads("cpu"), dev):
        torch.testing.assert_close(d, c, atol=2e-5, rtol=2e-5)


def paged_reference(q, key_cache, value_cache, block_tables, lens, scale):
    bs = key_cache.shape[1]
    outs = []
    for b in range(q.shape[0]):
        n = int(lens[b])
        pos = torch.arange(n)
        slots = block_tables[b, pos // bs].long() * bs + pos % bs
        k = key_cache.flatten(0, 1)[slots].transpose(0, 1).float()    # [Hkv, n, D]
        v = value_cache.flatten(0, 1)[slots].transpose(0, 1).float()
        outs.append(F.scaled_dot_product_attention(q[b].float()[:, None], k, v, scale=scale,
                                                   enable_gqa=True)[:, 0])
    return torch.stack(outs)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_paged_attention_matches_the_gathered_cache(dtype, tol):
    torch.manual_seed(4)
    num_blocks, bs, Hkv, Hq, D, B, max_blocks = 48, 16, 2, 8, 64, 3, 40
    key_cache = torch.randn(num_blocks, bs, Hkv, D, dtype=dtype)
    value_cache = torch.randn(num_blocks, bs, Hkv, D, dtype=dtype)
    q = torch.randn(B, Hq, D, dtype=dtype)
    lens = torch.tensor([5, 300, 640], dtype=torch.int32)
    block_tables = torch.stack([torch.randperm(num_blocks)[:max_blocks] for _ in range(B)]).int()
    block_tables[0, 1:] = -1   # unused entries (past the length) may hold anything
    scale = D ** -0.5
    out, names = launched(lambda: torch.ops.trnsim.paged_attention_decode(
        q.to("neuron"), key_cache.to("neuron"), value_cache.to("neuron"), block_tables.to("neuron"),
        lens.to("neuron"), scale).cpu())
    assert "paged_attention_decode" in " ".join(names)
    expected = paged_reference(q, key_cache, value_cache, block_tables, lens, scale)
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


def test_paged_attention_has_a_shape_function_for_tracing():
    q = torch.empty(2, 8, 64, device="meta", dtype=torch.bfloat16)
    cache = torch.empty(10, 16, 2, 32, device="meta", dtype=torch.bfloat16)
    tables = torch.empty(2, 5, device="meta", dtype=torch.int32)
    out = torch.ops.trnsim.paged_attention_decode(q, cache, cache, tables, tables[:, 0], 0.1)
    assert out.shape == (2, 8, 32) and out.dtype == torch.bfloat16 and out.device.type == "meta"


def test_paged_attention_rejects_mismatched_heads():
    q = torch.randn(1, 3, 8, device="neuron")
    cache = torch.randn(4, 16, 2, 8, device="neuron")
    tables = torch.zeros(1, 4, dtype=torch.int32, device="neuron")
    with pytest.raises(RuntimeError, match="query heads"):
        torch.ops.trnsim.paged_attention_decode(q, cache, cache, tables, tables[:, 0], 1.0)


# "static": generate() compiles the decode step of a static cache (torch.compile, the "neuron"
# backend); "static-eager" runs it eagerly (disable_compile), as the dynamic cache always does.
@pytest.mark.parametrize("cache", ["static", "static-eager", "dynamic"])
def test_llama_generate_with_a_kv_cache_gives_the_cpu_tokens(cache):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False, pad_token_id=1, eos_token_id=2, bos_token_id=None)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.tensor([[5, 9, 3, 17, 8], [4, 4, 30, 2, 11]])
    kwargs = dict(max_new_tokens=6, do_sample=False, min_new_tokens=6)
    if cache.startswith("static"):
        kwargs["cache_implementation"] = "static"
    if cache == "static-eager":
        kwargs["disable_compile"] = True
    cpu = model.generate(ids, **kwargs)
    model.to("neuron")
    torch.neuron.reset_fallback_ops()
    dev, names = launched(lambda: model.generate(ids.to("neuron"), **kwargs).cpu())
    assert dev.tolist() == cpu.tolist()
    if cache != "static":
        assert sum(n.startswith("sdpa_decode") for n in names) >= 2 * 5   # both layers, every decode step
    assert not any("attention" in op for op in torch.neuron.fallback_ops())
