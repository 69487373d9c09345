"""Hugging Face transformers models (tiny configs built from their config classes, nothing
downloaded) compiled with torch.compile(backend="neuron"): one training step's loss and every
parameter's gradient match the eager device step and the CPU."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from compile_checks import check_compiled_training_step  # noqa: E402


def _lm_loss(out):
    return out.loss


def _tokens(vocab, batch=2, seq=16, low=0):
    return torch.randint(low, vocab, (batch, seq))


def test_gpt2_compiles_with_eager_gradients():
    """GPT-2's causal mask and attention bias are tensor constants of the graph (get_attr)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    ids = _tokens(64)
    stats = check_compiled_training_step(transformers.GPT2LMHeadModel(cfg), dict(input_ids=ids, labels=ids), _lm_loss)
    assert stats["fusions"].get("attention_kernels", 0) >= 4   # flash forward and backward per layer


def test_llama_compiles_with_eager_gradients():
    """Grouped-query attention (two q heads per k/v head), rotary embeddings, RMS norm."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    ids = _tokens(64)
    stats = check_compiled_training_step(transformers.LlamaForCausalLM(cfg), dict(input_ids=ids, labels=ids), _lm_loss)
    assert stats["fusions"].get("attention_kernels", 0) >= 4


def test_bert_with_a_padding_mask_compiles_with_eager_gradients():
    """A padding mask reaches SDPA as an additive mask: the masked flash kernels."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, pad_token_id=0)
    ids = _tokens(64, low=1)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    stats = check_compiled_training_step(transformers.BertForMaskedLM(cfg),
                                         dict(input_ids=ids, attention_mask=mask, labels=ids), _lm_loss)
    assert stats["fusions"].get("attention_kernels", 0) >= 4


def test_t5_compiles_with_eager_gradients():
    """T5's learned relative position bias is a float attention mask that requires grad: its
    gradient comes from the compiled backward graph."""
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = transformers.T5ForConditionalGeneration(cfg)
    inputs = dict(input_ids=_tokens(64, seq=12, low=2), labels=_tokens(64, seq=8, low=2))
    # Eager attention on the device does not return a mask's gradient yet: compared with the CPU only.
    stats = check_compiled_training_step(model, inputs, _lm_loss, eager=False)
    assert stats["fusions"].get("attention_kernels", 0) >= 6
