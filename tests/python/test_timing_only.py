"""Timing-only mode: same simulated time and memory as functional mode, no values, exact OOM.

The mode is per process, so every case runs a short script in a fresh interpreter.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_script(source: str, mode: str | None, chip: str = "trn2", check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRNSIM_CHIP=chip, TRNSIM_AUTOLOAD="1", PYTHONPATH=str(EXAMPLES))
    env.pop("TRNSIM_MODE", None)
    if mode is not None:
        env["TRNSIM_MODE"] = mode
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=env, capture_output=True, text=True,
                          timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def last_json(proc: subprocess.CompletedProcess):
    return json.loads(proc.stdout.strip().splitlines()[-1])


# A tiny Llama-shaped model through the example's own code: prefill, decode with a KV cache,
# random initialisation, and a checkpointed training step with fused AdamW.
SMALL_MODEL_RUN = """
    import json, torch, trnsim
    import predict_llm as P
    cfg = P.LlamaConfig("tiny", layers=2, d_model=256, heads=4, kv_heads=2, ffn=512, vocab=1000, tied_embeddings=True)
    torch.neuron.manual_seed(0)
    model = P.Llama(cfg, 160).to(device="neuron", dtype=torch.bfloat16)   # initialised on the device
    out = {"timing_only": trnsim.is_timing_only(), "init_s": P.simulated_seconds(lambda: None)}
    with torch.no_grad():
        cache = P.KVCache(cfg, 2, 160, 0, "neuron", torch.bfloat16)
        prompt = torch.zeros(2, 128, dtype=torch.long, device="neuron")
        box = {}
        out["prefill_s"] = P.simulated_seconds(lambda: box.setdefault("logits", model(prompt, cache)))
        def decode():
            logits = box["logits"]
            for _ in range(4):
                logits = model(logits.argmax(-1), cache)
        out["decode_s"] = P.simulated_seconds(decode)
    del cache
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batch = torch.randint(0, cfg.vocab, (1, 128), device="neuron")
    def step():
        model.training_loss(batch, batch, loss_chunk=64).backward()
        optimizer.step()
        optimizer.zero_grad()
    out["train_s"] = [P.simulated_seconds(step) for _ in range(2)]
    out["peak_bytes"] = torch.neuron.max_memory_allocated()
    out["allocated_bytes"] = torch.neuron.memory_allocated()
    out["rng_state"] = torch.neuron.get_rng_state().tolist()
    out["device_ns"] = torch.neuron._device_time_ns()
    print(json.dumps(out))
"""


def test_small_model_same_time_and_memory_in_both_modes():
    functional = last_json(run_script(SMALL_MODEL_RUN, "functional"))
    timing = last_json(run_script(SMALL_MODEL_RUN, "timing"))
    assert functional.pop("timing_only") is False
    assert timing.pop("timing_only") is True
    assert functional["prefill_s"] > 0 and functional["decode_s"] > 0 and functional["train_s"][1] > 0
    assert timing == functional


VALUE_ACCESS = """
    import json, torch
    import trnsim.neuron
    x = torch.ones(4, device="neuron")
    results = {}
    for name, fn in [("item", lambda: x.sum().item()), ("cpu", lambda: x.cpu()), ("print", lambda: str(x)),
                     ("tolist", lambda: x.tolist()), ("bool", lambda: bool(x[0] > 0)),
                     ("nonzero", lambda: torch.nonzero(x)), ("masked_select", lambda: x[x > 0]),
                     ("unique", lambda: torch.unique(x)),
                     ("fallback", lambda: torch.special.bessel_j0(x))]:
        try:
            fn()
            results[name] = None
        except Exception as e:
            results[name] = [type(e).__name__, str(e).splitlines()[0]]
    y = x * 2 + 1   # native kernels still run (and take simulated time)
    results["device_ns"] = torch.neuron._device_time_ns()
    print(json.dumps(results))
"""


def test_value_access_raises_naming_the_operation():
    r = last_json(run_script(VALUE_ACCESS, "timing"))
    for name in ("item", "cpu", "print", "tolist", "bool"):
        assert r[name] is not None, name
        assert "timing-only mode" in r[name][1] and "values" in r[name][1], r[name]
    assert "item()" in r["item"][1]
    assert ".cpu()" in r["cpu"][1]
    assert "aten::nonzero" in r["nonzero"][1] and "depends on tensor values" in r["nonzero"][1]
    assert "aten::nonzero" in r["masked_select"][1] or "aten::masked_select" in r["masked_select"][1]
    assert "aten::_unique2" in r["unique"][1] or "aten::unique" in r["unique"][1]
    assert "special_bessel_j0" in r["fallback"][1] and "not implemented natively" in r["fallback"][1]
    assert r["device_ns"] > 0


OOM = """
    import json, torch
    import trnsim.neuron
    total = torch.neuron.mem_get_info()[1]
    kept = []
    try:
        while True:
            kept.append(torch.empty(1 << 30, dtype=torch.uint8, device="neuron"))
    except torch.OutOfMemoryError as e:
        message = str(e).splitlines()[0]
    print(json.dumps({"allocated": len(kept), "total": total, "message": message,
                      "peak": torch.neuron.max_memory_allocated()}))
"""


def test_out_of_memory_is_exact():
    functional = last_json(run_script(OOM, "functional"))
    timing = last_json(run_script(OOM, "timing"))
    assert timing == functional
    assert timing["allocated"] == timing["total"] // (1 << 30)
    assert timing["message"].startswith("neuron out of memory. Tried to allocate 1.00 GiB")


LARGE_MODEL_NO_HOST_MEMORY = """
    import json, torch
    import predict_llm as P
    # 8 GiB of bf16 weights, initialised on the device (random init, no host copy).
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False, dtype=torch.bfloat16, device="neuron")
                                  for _ in range(64)])
    with torch.no_grad():
        model(torch.empty(8, 8192, dtype=torch.bfloat16, device="neuron"))
    # This process's own peak RSS: VmHWM starts afresh at exec, where getrusage's ru_maxrss carries
    # over the peak of the parent that forked it (the whole test session).
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"allocated": torch.neuron.memory_allocated(), "rss_kib": int(peak.split()[1])}))
"""


def test_full_size_weights_take_no_host_memory():
    r = last_json(run_script(LARGE_MODEL_NO_HOST_MEMORY, "timing"))
    assert r["allocated"] >= 8 * 2**30
    assert r["rss_kib"] < 1.5 * 2**20   # under 1.5 GiB of host memory


def test_mode_api_and_its_limits():
    r = last_json(run_script("""
        import json, os, torch, trnsim
        out = {"default": trnsim.is_timing_only()}
        with trnsim.timing_only():
            out["inside"] = trnsim.is_timing_only()
            out["env"] = os.environ.get("TRNSIM_MODE")
        out["after_unused_block"] = trnsim.is_timing_only()
        torch.ones(1, device="neuron")          # the first device now exists, in functional mode
        try:
            trnsim.timing_only()
            out["switch"] = None
        except RuntimeError as e:
            out["switch"] = str(e).splitlines()[0]
        print(json.dumps(out))
    """, None))
    assert r["default"] is False and r["inside"] is True and r["env"] == "timing"
    assert r["after_unused_block"] is False
    assert "cannot switch to timing-only mode" in r["switch"]

    r = last_json(run_script("""
        import json, torch, trnsim
        with trnsim.timing_only():
            x = torch.ones(2, device="neuron")
        print(json.dumps({"after_used_block": trnsim.is_timing_only()}))
    """, None))
    assert r["after_used_block"] is True

    bad = run_script("import torch, trnsim.neuron; torch.ones(1, device='neuron')", "fast", check=False)
    assert bad.returncode != 0 and "TRNSIM_MODE=fast is not a mode" in bad.stderr


@pytest.mark.parametrize("chip", ["trn3"])
def test_trnsim_run_timing_only(tmp_path, chip):
    script = tmp_path / "step.py"
    script.write_text("import torch, trnsim\nassert trnsim.is_timing_only()\n"
                      "x = torch.ones(256, 256, dtype=torch.bfloat16)\nprint('sum shape', (x @ x).sum(0).shape)\n")
    env = dict(os.environ, TRNSIM_CHIP=chip)
    env.pop("TRNSIM_MODE", None)
    proc = subprocess.run([sys.executable, "-m", "trnsim.cli", "run", "--timing-only", "--profile", str(tmp_path / "p"),
                           str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "sum shape torch.Size([256])" in proc.stdout
    assert (tmp_path / "p" / "trace.json").is_file()
