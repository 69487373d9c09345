"""A neuron process group's inner gloo group ends its worker threads before the interpreter
finalizes (trnsim/distributed/lifetime.py): a worker still releasing a finished collective's
tensors then aborted the rank at exit. Whether a rank aborts is a race (bench/exit_stress.py
repeats 2-rank runs); what prevents it is checked here on one rank: no gloo worker is left when
a group is destroyed, nor when atexit handlers have run with a group still alive, and a
destroyed group's collectives raise."""

import subprocess
import sys
import textwrap


def test_gloo_workers_are_joined_at_destroy_and_before_finalization():
    source = textwrap.dedent("""
        import atexit
        def workers():
            from trnsim.distributed import lifetime
            return lifetime.gloo_worker_threads()
        # Registered before trnsim's handler, so it runs after it (atexit runs the last registered first).
        atexit.register(lambda: print("AT EXIT", workers(), flush=True))
        import torch, torch.distributed as dist, trnsim.neuron
        dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore())
        other = dist.new_group([0], backend="neuron")
        t = torch.ones(4, device="neuron")
        dist.all_reduce(t)
        dist.all_reduce(t, group=other)
        print("ALIVE", workers(), flush=True)
        backend = other._get_backend(torch.device("neuron"))
        dist.destroy_process_group(other)
        print("DESTROYED ONE", workers(), flush=True)
        try:
            backend.allreduce([t]).wait()
        except Exception as e:
            print("RAISED", type(e).__name__, e, flush=True)
        dist.all_reduce(t)   # the default group still works, and is left alive at exit
        print("VALUES", t.cpu().tolist(), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout

    def value(prefix: str) -> str:
        return next(line[len(prefix):].strip() for line in out.splitlines() if line.startswith(prefix))

    alive = int(value("ALIVE"))
    assert alive >= 2, out                 # two groups, at least one worker each
    assert 0 < int(value("DESTROYED ONE")) < alive, out
    assert "was shut down" in value("RAISED"), out
    assert value("VALUES") == "[1.0, 1.0, 1.0, 1.0]", out
    assert value("AT EXIT") == "0", out
