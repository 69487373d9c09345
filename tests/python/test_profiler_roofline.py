"""Analytic roofline bounds: parameter counts of the built-in models and the decode,
prefill and training bounds against hand computations and public worked numbers."""

import json

import pytest

from trnsim import roofline


def test_builtin_models_have_their_published_sizes():
    assert set(roofline.builtin_models()) >= {"llama3-8b", "llama3-70b", "wan2.1-14b"}
    assert roofline.load_model("llama3-8b").params == pytest.approx(8.03e9, rel=0.01)
    assert roofline.load_model("llama3-70b").params == pytest.approx(70.55e9, rel=0.01)
    assert roofline.load_model("wan2.1-14b").params == pytest.approx(14e9, rel=0.05)


def test_training_flops_are_palm():
    m = roofline.load_model("llama3-8b")
    T = m.seq_len
    assert m.training_flops_per_token() == 6 * m.params_per_token + 12 * m.layers * m.heads * m.head_dim * T
    # performance.md section 5: attention is ~22% of Llama-3-8B training FLOPs at 8K.
    assert m.attention_flops_per_token(T) / m.training_flops_per_token() == pytest.approx(0.22, abs=0.02)
    # performance.md section 5 (with N = all 14B parameters): attention is ~69% of Wan-14B's FLOPs.
    wan = roofline.load_model("wan2.1-14b")
    attention = wan.attention_flops_per_token(wan.seq_len)
    assert attention / (6 * wan.params + attention) == pytest.approx(0.69, abs=0.02)
    # Per-token N leaves out the cross-attention K/V projections (applied to the text tokens only).
    assert wan.params_per_token < wan.params - wan.vocab * wan.hidden


def test_decode_bound_matches_the_worked_numbers():
    # performance.md 4.2: Llama-3.1-70B single stream, BF16, tokens/s = BW / weight bytes.
    m = roofline.load_model("llama3-70b")
    expected = {"h100": 23.7, "h200": 34.0, "b200": 56.7}
    for name, tok_s in expected.items():
        c = roofline.chip(name)
        b = roofline.bounds(m, c, batch=1, context=1)
        assert b.decode_bound == "bandwidth"
        assert b.decode_chips == 2 if name == "h100" else 1   # 141 GB of BF16 weights
        # Per chip: the weights spread over the chips that hold them.
        assert b.decode_tokens_per_s == pytest.approx(tok_s, rel=0.01)


def test_decode_bound_formula_by_hand():
    m = roofline.load_model("llama3-8b")
    c = roofline.chip("trn2")
    b = roofline.bounds(m, c, batch=8, context=4096, price=2.0)
    moved = m.params * 2 + 8 * 4096 * 2 * m.layers * m.kv_heads * m.head_dim * 2
    assert b.decode_chips == 1
    t_step = max(moved / c.hbm_bytes_per_s, 2 * m.params_per_token * 8 / c.bf16)
    assert b.decode_tokens_per_s == pytest.approx(8 / t_step)
    assert b.usd_per_million_tokens == pytest.approx(2.0 / (b.decode_tokens_per_s * 3600) * 1e6)
    assert b.usd_per_useful_pflop_hour == pytest.approx(2.0 / (0.4 * c.bf16 / 1e15))


def test_trn_chips_come_from_the_presets():
    trn2 = roofline.chip("trn2")
    assert trn2.bf16 == pytest.approx(8 * 128 * 128 * 2 * 2.4e9)
    assert trn2.hbm_bytes_per_s == pytest.approx(2.9e12)
    assert trn2.price == pytest.approx(2.235)
    assert roofline.chip("trn3").price is None


def test_model_json_errors_are_clear(tmp_path):
    path = tmp_path / "m.json"
    data = json.loads((roofline.MODELS_DIR / "llama3-8b.json").read_text())
    data["layerz"] = 3
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="unknown field.*layerz"):
        roofline.load_model(str(path))
    with pytest.raises(ValueError, match="unknown model"):
        roofline.load_model("no-such-model")
