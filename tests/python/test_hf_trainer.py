"""Hugging Face Trainer, unmodified, on neuron: it picks the device, trains (gradient accumulation,
bf16 autocast), evaluates, saves and resumes, with the CPU's losses."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402
from transformers.utils import is_torch_neuron_available  # noqa: E402

STEPS = 4


class TokenDataset(torch.utils.data.Dataset):
    """Counting sequences (each token one more than the last, mod 64) from random starts: learnable."""

    def __init__(self, n: int, seed: int) -> None:
        starts = torch.randint(0, 64, (n, 1), generator=torch.Generator().manual_seed(seed))
        self.ids = (starts + torch.arange(16)) % 64

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_llama(tie: bool = False) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                        tie_word_embeddings=tie))


def train(out, *, cpu: bool, bf16: bool = False, resume: str | None = None, tie: bool = False) -> dict:
    args = TrainingArguments(str(out), use_cpu=cpu, bf16=bf16, per_device_train_batch_size=4,
                             gradient_accumulation_steps=2, max_steps=STEPS, learning_rate=1e-2, logging_steps=1,
                             eval_strategy="steps", eval_steps=2, save_steps=2, report_to=[], seed=0,
                             disable_tqdm=True, dataloader_num_workers=0)
    model = tiny_llama(tie)
    dtypes = set()   # what the MLP's matmuls produce: bfloat16 under the Trainer's autocast
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: dtypes.add(out.dtype))
    trainer = Trainer(model=model, args=args, train_dataset=TokenDataset(32, 1), eval_dataset=TokenDataset(8, 2))
    torch.neuron.reset_fallback_ops()
    trainer.train(resume_from_checkpoint=resume)
    history = trainer.state.log_history
    return {"device": args.device, "param_device": next(trainer.model.parameters()).device,
            "mixed_precision": trainer.accelerator.mixed_precision, "matmul_dtypes": dtypes,
            "loss": {h["step"]: h["loss"] for h in history if "loss" in h},
            "eval": {h["step"]: h["eval_loss"] for h in history if "eval_loss" in h},
            "fallbacks": torch.neuron.fallback_ops()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer")
    return {"cpu": train(root / "cpu", cpu=True), "neuron": train(root / "neuron", cpu=False),
            "resumed": train(root / "resumed", cpu=False, resume=str(root / "neuron" / "checkpoint-2")),
            "cpu_bf16": train(root / "cpu_bf16", cpu=True, bf16=True),
            "neuron_bf16": train(root / "neuron_bf16", cpu=False, bf16=True)}


def test_training_arguments_pick_neuron():
    assert is_torch_neuron_available()
    assert TrainingArguments("unused", report_to=[]).device == torch.device("neuron", 0)


def test_losses_match_cpu(runs):
    cpu, neuron = runs["cpu"], runs["neuron"]
    assert neuron["device"] == torch.device("neuron", 0) and neuron["param_device"].type == "neuron"
    assert sorted(neuron["loss"]) == [1, 2, 3, 4] and sorted(neuron["eval"]) == [2, 4]
    assert neuron["loss"] == pytest.approx(cpu["loss"], rel=1e-5)
    assert neuron["eval"] == pytest.approx(cpu["eval"], rel=1e-5)
    assert neuron["loss"][4] < neuron["loss"][1]


def test_resume_from_checkpoint_continues_the_same_run(runs):
    resumed, neuron = runs["resumed"], runs["neuron"]
    assert resumed["loss"][3] == neuron["loss"][3] and resumed["loss"][4] == neuron["loss"][4]
    assert resumed["eval"][4] == neuron["eval"][4]


def test_bf16_autocast_tracks_cpu_bf16(runs):
    cpu, neuron = runs["cpu_bf16"], runs["neuron_bf16"]
    assert neuron["mixed_precision"] == "bf16" and neuron["device"].type == "neuron"
    assert neuron["matmul_dtypes"] == {torch.bfloat16} and runs["neuron"]["matmul_dtypes"] == {torch.float32}
    # bf16 rounding differs between the CPU's kernels and the device's (fp32 PSUM accumulation)
    assert neuron["loss"] == pytest.approx(cpu["loss"], rel=2e-3)
    assert neuron["eval"] == pytest.approx(cpu["eval"], rel=2e-3)


def test_training_runs_without_cpu_fallbacks(runs):
    assert runs["neuron"]["fallbacks"] == {}
    assert runs["neuron_bf16"]["fallbacks"] == {}


def test_tied_embeddings_train_as_on_cpu(tmp_path):
    cpu = train(tmp_path / "cpu", cpu=True, tie=True)
    neuron = train(tmp_path / "neuron", cpu=False, tie=True)
    assert neuron["loss"] == pytest.approx(cpu["loss"], rel=1e-5)
