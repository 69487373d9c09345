"""Bandwidth in the profiler and the roofline: MBU and the HBM bound per op and per step (against
the device's HBM bandwidth, a logical core's share), in the summary and the HTML report; FP8 and
BF16 peaks and ridge points in `trnsim roofline` and `trnsim chips`."""

import json

import pytest
import torch
import torch.nn.functional as F

import trnsim
import trnsim.neuron  # noqa: F401
from trnsim import cli, roofline
from trnsim.report import render_html


def test_decode_attention_rows_carry_mbu_and_the_bandwidth_bound():
    q = torch.randn(1, 8, 1, 64, device="neuron", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 2048, 64, device="neuron", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 2048, 64, device="neuron", dtype=torch.bfloat16)
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)   # the program is built outside the profile
    with trnsim.profile() as prof:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        prof.step()
    s = prof.summary()
    info = trnsim._core.chip_info(s.chip)
    assert s.hbm_bytes_per_s == pytest.approx(info["hbm_bytes_per_s"] / info["logical_cores"])
    row = next(r for r in s.ops if "attention" in r.name)
    assert row.hbm_bytes >= k.nbytes + v.nbytes
    assert row.bandwidth_bound_s == pytest.approx(row.hbm_bytes / s.hbm_bytes_per_s)
    assert row.mbu == pytest.approx(row.bandwidth_bound_s / row.time_s)
    assert 0.0 < row.mbu < 1.0
    step = s.steps[0]
    assert step.bandwidth_bound_s == pytest.approx(step.hbm_bytes / s.hbm_bytes_per_s)
    assert 0.0 < step.mbu <= 1.0
    d = s.to_dict()
    assert d["ops"][0]["mbu"] >= 0 and "bandwidth_bound_s" in d["steps"][0]
    lines = s.table().splitlines()
    op_header = lines[lines.index(next(l for l in lines if l.startswith("Top ops"))) + 1]
    assert "HBM bound" in op_header and "MBU" in op_header
    assert "HBM bound" in next(l for l in lines if l.startswith("step "))
    page = render_html(s, prof.op_points(), {"start_s": 0.0, "end_s": 1.0, "utilisation": {},
                                             "hbm_bytes_per_s": []})
    assert "HBM bound" in page and f"{100 * row.mbu:.1f}%" in page


def test_roofline_lists_fp8_and_bf16_peaks_and_ridge_points(capsys):
    assert cli.main(["roofline", "--model", "llama3-8b", "--chip", "trn3", "--json"]) == 0
    chip = json.loads(capsys.readouterr().out)["bounds"][0]["chip"]
    assert chip["ridge_fp8"] == pytest.approx(chip["fp8"] / chip["hbm_bytes_per_s"])
    assert chip["ridge_fp8"] == pytest.approx(2 * chip["ridge"])   # trn3's FP8 runs at twice its BF16 rate
    assert cli.main(["roofline", "--model", "llama3-8b", "--chip", "trn3"]) == 0
    out = capsys.readouterr().out
    assert "ridge BF16" in out and "ridge FP8" in out and f"{chip['ridge_fp8']:.0f}" in out
    assert cli.main(["chips", "--json"]) == 0
    trn2 = {c["name"]: c for c in json.loads(capsys.readouterr().out)}["trn2"]
    assert trn2["ridge_fp8"] == pytest.approx(trn2["fp8_flops"] / trn2["hbm_bytes_per_s"])
    assert roofline.chip("h100").ridge_fp8 == pytest.approx(1979e12 / 3.35e12)
