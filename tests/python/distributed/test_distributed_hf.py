"""The Hugging Face stack, unmodified, on 2 neuron ranks: an Accelerate script under
`accelerate launch --num_processes 2` trains to the weights and losses of one process on the
whole batches (fp32, 1e-5 relative), and transformers' Trainer runs under torchrun with each rank
on its own core."""

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


def test_trainer_under_torchrun_trains_each_rank_on_its_core(tmp_path):
    r = torchrun("hf_trainer.py", str(tmp_path), timeout=180, HF_HUB_OFFLINE=1)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2, out[-6000:]
