"""torch.compile(backend="neuron") of graphs holding functional collectives, on 2 neuron ranks:
values as in eager execution, collectives as communication nodes overlapping independent compute,
and tensor parallelism over DTensor compiled with its gradients (workers/compiled_collectives.py)."""

from dist_launch import torchrun


def test_compiled_functional_collectives_are_exact_and_overlap_compute():
    r = torchrun("compiled_collectives.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("DONE") == 2, out[-6000:]
    for check in ("compiled values", "communication nodes", "overlap", "compiled tensor parallel gradients"):
        assert out.count(f"PASS {check}") == 2, (check, out[-6000:])
