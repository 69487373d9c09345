"""transformers.Trainer, unmodified, on neuron. Under torchrun with 2 processes each rank trains on
its own core (neuron:LOCAL_RANK) inside DistributedDataParallel and the ranks end with identical
weights; run as one process (no torchrun) it trains on batches twice as large, which are the two
ranks' batches together. Prints "LOSSES <the logged losses>" and "DONE". argv: output folder.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

STEPS, PER_RANK = 3, 4
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        starts = torch.randint(0, 64, (n, 1), generator=torch.Generator().manual_seed(1))
        self.ids = (starts + torch.arange(16)) % 64

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))
batch = PER_RANK if WORLD > 1 else 2 * PER_RANK
args = TrainingArguments(sys.argv[1], per_device_train_batch_size=batch, max_steps=STEPS, learning_rate=1e-2,
                         logging_steps=1, report_to=[], seed=0, disable_tqdm=True, dataloader_num_workers=0,
                         save_strategy="no")
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
assert args.device == torch.device("neuron", local_rank), args.device
if WORLD > 1:
    assert args.world_size == WORLD and args.parallel_mode.value == "distributed", (args.world_size, args.parallel_mode)
initial = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
torch.neuron.reset_fallback_ops()
trainer = Trainer(model=model, args=args, train_dataset=TokenDataset(32))
trainer.train()
assert not torch.neuron.fallback_ops(), torch.neuron.fallback_ops()
losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
assert len(losses) == STEPS, losses
flat = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
assert flat.device == torch.device("neuron", local_rank), flat.device
assert not torch.equal(flat.cpu(), initial.cpu())   # it trained
if WORLD > 1:
    assert isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel), type(trainer.model_wrapped)
    ranks = [torch.empty_like(flat) for _ in range(WORLD)]
    dist.all_gather(ranks, flat)
    torch.testing.assert_close(ranks[0].cpu(), ranks[1].cpu(), rtol=0, atol=0)
print(f"LOSSES {' '.join(map(repr, losses))}\nDONE\n", end="", flush=True)
if WORLD > 1:
    dist.destroy_process_group()
