"""Training with torch.distributed's own wrappers on 2 neuron ranks."""

from dist_launch import torchrun


def test_ddp_on_two_ranks_gives_the_single_device_losses():
    r = torchrun("ddp.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2 and "LOSSES" in out, out[-6000:]
