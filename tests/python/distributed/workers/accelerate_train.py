"""An Accelerate training script, unmodified, under `accelerate launch --num_processes 2`: each
process gets its own batches of the prepared DataLoader (Accelerate's sharding), DDP averages the
gradients, and after the steps every rank holds the weights of one process training on both
ranks' batches at once, with the mean of the ranks' losses equal to that process's loss
(fp32, 1e-5 relative), with no CPU fallback. Prints "LOSSES ..." and "DONE".
"""

import torch
import torch.nn.functional as F
from accelerate import Accelerator

STEPS, PER_PROCESS = 4, 8


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def dataset(rows):
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(rows, 12, generator=g), torch.randn(rows, 4, generator=g))


accelerator = Accelerator()
world = accelerator.num_processes
assert accelerator.device.type == "neuron", accelerator.device
assert accelerator.distributed_type.value == "MULTI_NEURON", accelerator.distributed_type
assert accelerator.device.index == accelerator.local_process_index, accelerator.device

net = accelerator.prepare(model())
optimizer = accelerator.prepare(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
loader = accelerator.prepare(torch.utils.data.DataLoader(dataset(STEPS * world * PER_PROCESS), batch_size=PER_PROCESS))
losses = []
torch.neuron.reset_fallback_ops()
for x, y in loader:
    assert x.device == accelerator.device and x.shape[0] == PER_PROCESS
    loss = F.mse_loss(net(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.detach())
assert len(losses) == STEPS, len(losses)
assert not torch.neuron.fallback_ops(), torch.neuron.fallback_ops()
mean = accelerator.reduce(torch.stack(losses), reduction="mean")

# One process, whole batches (both ranks' rows of each step), the same optimizer.
single = model().to(accelerator.device)
single_opt = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
reference = []
for x, y in torch.utils.data.DataLoader(dataset(STEPS * world * PER_PROCESS), batch_size=world * PER_PROCESS):
    loss = F.mse_loss(single(x.to(accelerator.device)), y.to(accelerator.device))
    single_opt.zero_grad()
    loss.backward()
    single_opt.step()
    reference.append(loss.detach())
reference = torch.stack(reference)
if accelerator.is_main_process:
    print(f"LOSSES {mean.cpu().tolist()} {reference.cpu().tolist()}\n", end="", flush=True)
torch.testing.assert_close(mean.cpu(), reference.cpu(), rtol=1e-5, atol=0)
for (name, got), want in zip(accelerator.unwrap_model(net).named_parameters(), single.parameters()):
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=1e-5, atol=1e-7, msg=name)
print("DONE\n", end="", flush=True)
accelerator.end_training()
