"""The HTML report is one self-contained file (no scripts, nothing fetched) that a
headless Chromium renders to a non-blank PNG."""

import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import trnsim
import trnsim.neuron  # noqa: F401
from trnsim.report import roofline_svg


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with trnsim.profile() as prof:
        for _ in range(2):
            loss = model(torch.randn(64, 128, device="neuron")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    path = tmp_path_factory.mktemp("report") / "report.html"
    prof.export_html(str(path))
    return path


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert not re.search(r"url\(", text)
    for section in ("Step metrics", "Roofline", "Engine utilisation over time", "Top ops", "Top modules"):
        assert section in text
    assert text.count("<svg") == 2
    assert "<circle" in text   # ops on the roofline


def test_roofline_places_points_under_the_roof():
    svg = roofline_svg([{"op": "mm", "scope": "", "calls": 1, "time_s": 1e-3, "flops": 1e9, "hbm_bytes": 1e6}],
                       peak_flops=1e14, bytes_per_s=1e12)
    assert svg.count("<circle") == 1 and "ridge 100 FLOP/B" in svg


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian package 'chromium', in the Makefile's APT_PACKAGES)")
    png = tmp_path / "report.png"
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--screenshot={png}", "--window-size=1200,2400", report.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert png.exists(), result.stderr
    from matplotlib.image import imread
    pixels = imread(str(png))
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1000
    rgb = pixels[..., :3].reshape(-1, 3)
    # Rendered content: mostly white page with many distinct colours (text, charts).
    assert len(np.unique((rgb * 255).astype(np.uint8), axis=0)) > 50
    assert (rgb.mean(axis=1) < 0.5).mean() > 0.005   # dark pixels: text was drawn
