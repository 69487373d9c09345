"""Decode against the HBM bandwidth bound: model bandwidth utilisation (MBU = HBM bytes /
(simulated time x HBM bandwidth of the device, a logical NeuronCore: lnc physical cores' share)),
in timing-only mode, per chip in a fresh process.

    decode_attention_mbu_ctx8k_<chip>        the decode attention kernel alone (SDPA, eager), one
                                             Llama-3-8B layer: batch 1, 32 query heads on 8 k/v
                                             heads of 128, an 8192-token bf16 cache; bytes = K, V,
                                             Q and the output; time = the kernel's launch
    paged_attention_mbu_ctx8k_<chip>         the same through trnsim.paged_attention_decode
                                             (vLLM's cache layout, 16-token blocks)
    decode_mbu_llama8b_b1_<chip>             a whole eager Llama-3-8B decode step (examples/
                                             predict_llm.py), batch 1 at an 8192-token context:
                                             compulsory bytes (weights + KV cache) / step time
    decode_mbu_llama8b_b8_ctx2k_<chip>       the same at batch 8, 2048-token context

Prints `BENCH <name> <value> <unit>` lines, then the times they come from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RUN = r"""
import json, sys, torch
import torch.nn.functional as F
import trnsim.neuron
from trnsim import _C, _core

info = _core.chip_info(_C._chip_name())
bandwidth = float(info["hbm_bytes_per_s"]) / int(info["logical_cores"])
out = {"chip": info["name"], "lnc": int(info["lnc"]), "bandwidth": bandwidth}

def kernel(fn, prefix):
    fn()   # builds the program
    _C._set_launch_trace(True)
    fn()
    _C._set_launch_trace(False)
    slices = [t for t in _C._take_launch_trace() if t[0].startswith(prefix)]
    assert len(slices) == 1, [t[0] for t in _C._take_launch_trace()]
    name, _, start, end, _, _, hbm = slices[0]
    return (end - start) * 1e-12, hbm

B, Hq, Hkv, D, S = 1, 32, 8, 128, 8192
dev, bf = "neuron", torch.bfloat16
q = torch.empty(B, Hq, 1, D, device=dev, dtype=bf)
k = torch.empty(B, Hkv, S, D, device=dev, dtype=bf)
v = torch.empty(B, Hkv, S, D, device=dev, dtype=bf)
with torch.no_grad():
    t, hbm = kernel(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), "sdpa_decode")
useful = 2 * B * Hkv * S * D * 2 + 2 * B * Hq * D * 2
out["attention"] = {"time_s": t, "hbm_bytes": hbm, "useful_bytes": useful}

bs = 16
blocks = B * S // bs
kc = torch.empty(blocks, bs, Hkv, D, device=dev, dtype=bf)
vc = torch.empty(blocks, bs, Hkv, D, device=dev, dtype=bf)
qp = torch.empty(B, Hq, D, device=dev, dtype=bf)
tables = torch.arange(blocks, dtype=torch.int32).view(B, -1).to(dev)
lens = torch.full((B,), S, dtype=torch.int32).to(dev)
with torch.no_grad():
    t, hbm = kernel(lambda: torch.ops.trnsim.paged_attention_decode(qp, kc, vc, tables, lens, D ** -0.5),
                    "paged_attention_decode")
out["paged"] = {"time_s": t, "hbm_bytes": hbm, "useful_bytes": useful}

if "--e2e" in sys.argv:
    import predict_llm as P
    for key, batch, context in (("b1", 1, 8192), ("b8_ctx2k", 8, 2048)):
        p = P.predict_decode(P.LLAMA3_8B, batch, context, 2)
        out[key] = {"step_s": p.step_s, "bytes": p.compulsory_bytes, "error": p.error}
print(json.dumps(out))
"""


def main() -> None:
    e2e = "--no-e2e" not in sys.argv
    for chip in ("trn2", "trn3"):
        env = dict(os.environ, TRNSIM_MODE="timing", TRNSIM_CHIP=chip, PYTHONPATH=str(EXAMPLES))
        proc = subprocess.run([sys.executable, "-c", RUN] + (["--e2e"] if e2e else []), env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"decode benchmark on {chip} failed:\n{proc.stderr[-4000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        bw = r["bandwidth"]
        for key, name in (("attention", "decode_attention"), ("paged", "paged_attention")):
            a = r[key]
            print(f"BENCH {name}_mbu_ctx8k_{chip} {a['useful_bytes'] / (a['time_s'] * bw):.3f} MBU")
            print(f"# {name} {chip}: {a['time_s'] * 1e6:.1f} us, bound {a['useful_bytes'] / bw * 1e6:.1f} us at "
                  f"{bw / 1e9:.0f} GB/s (LNC={r['lnc']}); {a['hbm_bytes'] / 2**20:.1f} MiB moved")
        for key, name in (("b1", "decode_mbu_llama8b_b1"), ("b8_ctx2k", "decode_mbu_llama8b_b8_ctx2k")):
            if key not in r:
                continue
            d = r[key]
            if d["error"]:
                print(f"# {name}_{chip}: {d['error']}")
                continue
            print(f"BENCH {name}_{chip} {d['bytes'] / (d['step_s'] * bw):.3f} MBU")
            print(f"# {name}_{chip}: {d['step_s'] * 1e3:.2f} ms per step, bound {d['bytes'] / bw * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
