"""On 2 neuron ranks, fp32, 1e-5 relative to one device: tensor parallelism with SequenceParallel
norms and loss_parallel's cross-entropy over vocabulary-sharded logits, and activation
checkpointing (torch.utils.checkpoint) inside DDP and inside FSDP2."""

from dist_launch import torchrun


def run(script: str) -> str:
    r = torchrun(script)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2, out[-6000:]
    return out


def test_sequence_parallel_and_loss_parallel_give_the_single_device_losses():
    assert "LOSSES" in run("sequence_parallel.py")


def test_activation_checkpointing_in_ddp_and_fsdp2_gives_the_single_device_losses():
    out = run("activation_checkpointing.py")
    assert out.count("PASS ac ddp") == 2 and out.count("PASS ac fsdp2") == 2, out[-6000:]
