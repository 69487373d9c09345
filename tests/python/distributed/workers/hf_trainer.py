"""transformers.Trainer, unmodified, under torchrun with 2 processes on neuron: each rank trains on
its own core (neuron:LOCAL_RANK) inside DistributedDataParallel, the steps log finite losses, and
the ranks end with identical weights (the averaged gradients). Prints "DONE".
argv: output folder.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

STEPS = 3


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
args = TrainingArguments(sys.argv[1], per_device_train_batch_size=4, max_steps=STEPS, learning_rate=1e-2,
                         logging_steps=1, report_to=[], seed=0, disable_tqdm=True, dataloader_num_workers=0,
                         save_strategy="no")
local_rank = int(os.environ["LOCAL_RANK"])
assert args.device == torch.device("neuron", local_rank), args.device
assert args.world_size == 2 and args.parallel_mode.value == "distributed", (args.world_size, args.parallel_mode)
initial = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
trainer = Trainer(model=model, args=args, train_dataset=TokenDataset(32))
trainer.train()
assert isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel), type(trainer.model_wrapped)
losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
assert len(losses) == STEPS and all(torch.isfinite(torch.tensor(losses))), losses
flat = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
assert flat.device == torch.device("neuron", local_rank), flat.device
ranks = [torch.empty_like(flat) for _ in range(2)]
dist.all_gather(ranks, flat)
torch.testing.assert_close(ranks[0].cpu(), ranks[1].cpu(), rtol=0, atol=0)
assert not torch.equal(flat.cpu(), initial.cpu())   # it trained
print(f"LOSSES {losses}\nDONE\n", end="", flush=True)
dist.destroy_process_group()
