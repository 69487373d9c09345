"""The Hugging Face stack, unmodified, on 2 neuron ranks: an Accelerate script under
`accelerate launch --num_processes 2` trains to the weights and losses of one process on the
whole batches (fp32, 1e-5 relative), and so does transformers' Trainer under torchrun, each rank on
its own core."""

import subprocess
import sys

import pytest
from dist_launch import WORKERS, free_port, torchrun, worker_env

pytest.importorskip("accelerate")
pytest.importorskip("transformers")


def test_accelerate_launch_two_processes_gives_the_single_process_run():
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
           "--main_process_port", str(free_port()), str(WORKERS / "accelerate_train.py")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=worker_env())
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2 and "LOSSES" in out, out[-6000:]


def logged_losses(r: subprocess.CompletedProcess, ranks: int) -> list[float]:
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == ranks, out[-6000:]
    rows = {line for line in r.stdout.splitlines() if line.startswith("LOSSES ")}
    assert len(rows) == 1, rows   # every rank logs the same (averaged) losses
    return [float(v) for v in rows.pop().split()[1:]]


def test_trainer_under_torchrun_gives_the_single_process_losses(tmp_path):
    two = logged_losses(torchrun("hf_trainer.py", str(tmp_path / "two"), timeout=180, HF_HUB_OFFLINE=1), 2)
    one = logged_losses(subprocess.run([sys.executable, str(WORKERS / "hf_trainer.py"), str(tmp_path / "one")],
                                       capture_output=True, text=True, timeout=180, env=worker_env()), 1)
    assert len(two) == 3 and two == pytest.approx(one, rel=1e-5), (two, one)
