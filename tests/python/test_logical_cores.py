"""Logical NeuronCores as PyTorch sees them: device count and memory per device follow the chip's
LNC (TRNSIM_LNC) and the instance (TRNSIM_INSTANCE); SPMD kernels give the CPU's values; and the
MFU of a hand-counted matmul is the same in the profiler as counted by hand against the device's
peak (lnc physical cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import trnsim

PROBE = """
import json, torch
import trnsim.neuron
p = torch.neuron.get_device_properties(0)
print(json.dumps({"count": torch.neuron.device_count(), "memory": p.total_memory, "cores": p.physical_cores,
                  "peak": p.peak_flops_bf16}))
"""


def probe(**env) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("TRNSIM_LNC", "TRNSIM_INSTANCE", "TRNSIM_CHIP")}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


GiB = 1 << 30


@pytest.mark.parametrize("chip, lnc, count, memory_gib, cores", [
    ("trn2", None, 4, 24, 2),      # LNC=2 is trn2's default: 4 logical cores of 2 physical
    ("trn2", "1", 8, 12, 1),
    ("trn3", None, 4, 36, 2),
    ("trn1", None, 2, 16, 1),
])
def test_device_count_and_memory_follow_the_lnc(chip, lnc, count, memory_gib, cores):
    env = {"TRNSIM_CHIP": chip}
    if lnc:
        env["TRNSIM_LNC"] = lnc
    got = probe(**env)
    assert got["count"] == count
    assert got["memory"] == memory_gib * GiB
    assert got["cores"] == cores
    info = trnsim._core.chip_info(chip)
    assert got["peak"] == pytest.approx(cores * info["peak_flops_bf16_per_core"])


def test_an_instance_preset_gives_every_logical_core_of_its_chips():
    assert probe(TRNSIM_INSTANCE="trn2.48xlarge")["count"] == 16 * 4
    assert probe(TRNSIM_INSTANCE="trn1.32xlarge")["count"] == 16 * 2
    assert probe(TRNSIM_INSTANCE="trn3-ultraserver-gen2")["count"] == 4 * 4   # one server of 4 chips


def test_trn1_has_no_logical_cores_of_two():
    with pytest.raises(RuntimeError, match="lnc"):
        probe(TRNSIM_CHIP="trn1", TRNSIM_LNC="2")
    with pytest.raises(RuntimeError, match="TRNSIM_LNC"):
        probe(TRNSIM_LNC="3")


@pytest.mark.parametrize("shape", [(512, 256, 640), (16, 512, 2048), (4, 256, 384, 256)])
def test_spmd_matmuls_match_the_cpu(shape):
    torch.manual_seed(0)
    if len(shape) == 3:
        m, k, n = shape
        a, b = torch.randn(m, k), torch.randn(k, n)
        ref = a @ b
        got = (a.to("neuron") @ b.to("neuron")).cpu()
    else:
        bsz, m, k, n = shape
        a, b = torch.randn(bsz, m, k), torch.randn(bsz, k, n)
        ref = torch.bmm(a, b)
        got = torch.bmm(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(got, ref, rtol=2e-3, atol=2e-3)   # fp32 matmuls run as 4-pass bf16 on the TensorE


def test_spmd_pointwise_norm_softmax_attention_match_the_cpu():
    torch.manual_seed(1)
    x = torch.randn(1024, 768)
    ln = torch.nn.LayerNorm(768)
    q, k, v = (torch.randn(2, 4, 256, 64) for _ in range(3))
    dev = "neuron"
    torch.testing.assert_close(torch.nn.functional.gelu(x.to(dev) * 2 + 1).cpu(), torch.nn.functional.gelu(x * 2 + 1))
    torch.testing.assert_close(ln.to(dev)(x.to(dev)).cpu(), ln.cpu()(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.softmax(x.to(dev), -1).cpu(), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    got = torch.nn.functional.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev)).cpu()
    torch.testing.assert_close(got, ref, rtol=2e-3, atol=2e-3)


def test_profiler_mfu_of_a_hand_counted_matmul_uses_the_devices_peak():
    a = torch.randn(1024, 1024, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(1024, 1024, dtype=torch.bfloat16, device="neuron")
    torch.mm(a, b)   # builds the kernel
    with trnsim.profile() as prof:
        torch.mm(a, b)
        prof.step()
    s = prof.summary()
    step = s.steps[0]
    props = torch.neuron.get_device_properties(0)
    assert s.peak_flops == props.peak_flops_bf16 == props.physical_cores * trnsim._core.chip_info("trn2")[
        "peak_flops_bf16_per_core"]
    flops = 2 * 1024 ** 3
    assert step.model_flops == flops
    assert step.mfu == pytest.approx(flops / (step.time_s * props.peak_flops_bf16), rel=1e-9)
    # Both physical cores' TensorEs did the work of the one product.
    assert step.engine_busy_s.get("Tensor", 0) > 0 and step.engine_busy_s.get("Tensor (core 1)", 0) > 0
