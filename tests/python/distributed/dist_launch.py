"""Runs a worker script of tests/python/distributed/workers on 2 ranks, as torchrun would."""

import os
import socket
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(**extra) -> dict:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "TRNSIM_STRICT": env.get("TRNSIM_STRICT", "0")})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun(script: str, *args: str, nproc: int = 2, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """python -m torch.distributed.run --nproc-per-node <nproc> workers/<script> <args>."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(WORKERS / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=worker_env(**env))


def spawn_ranks(script: str, *args: str, nproc: int = 2, **env) -> list[subprocess.Popen]:
    """The ranks as separate processes without torchrun's agent (which would stop the others
    as soon as one fails): rank 0 hosts the store."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        e = worker_env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=nproc, LOCAL_WORLD_SIZE=nproc,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env)
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / script), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs
