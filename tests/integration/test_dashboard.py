"""The dashboard in a real headless Chromium (Debian's package; .ci/run installs it), against
`attribution serve`'s app on a real socket over the seeded warehouse (tests/conftest.py): the
pages render, the charts are drawn with data (pixels of their colours in the screenshot), the
diagnosis page shows the timeline with the root marked, and the page load times are printed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time

import httpx
import pytest
import uvicorn

from tests.services.prometheus import free_port
from workload_attribution.dashboard import ROLE_COLORS, STATE_COLORS
from workload_attribution.flows.config import Config
from workload_attribution.service.app import create_app

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    path = shutil.which("chromium")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: .ci/run must install it")
    pytest.skip("chromium not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def site(seeded_warehouse):
    saved = os.environ.pop("ATTRIBUTION_API_TOKEN", None)  # a trusted-network dashboard: no sign-in page in the way
    app = create_app(Config(warehouse=str(seeded_warehouse)))
    if saved is not None:
        os.environ["ATTRIBUTION_API_TOKEN"] = saved
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def shoot(url: str, out, tmp_path, size=(1400, 1000)) -> tuple[str, object]:
    from PIL import Image

    exe = chromium()
    common = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={size[0]},{size[1]}"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = subprocess.run([*common, f"--screenshot={out}", url], capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and out.exists(), shot.stderr[-2000:]
    return dom.stdout, Image.open(out).convert("RGB")


def pixels(img, hex_color: str, box=None) -> int:
    want = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    region = img.crop(box) if box else img
    return sum(n for n, rgb in region.getcolors(maxcolors=1 << 20) if rgb == want)


def test_list_page_draws_the_charts_with_data(site, tmp_path):
    timings = []
    for _ in range(3):
        t = time.perf_counter()
        assert httpx.get(f"{site}/ui", timeout=30).status_code == 200
        timings.append(time.perf_counter() - t)
    dom, img = shoot(f"{site}/ui", tmp_path / "list.png", tmp_path)
    assert "Diagnoses by terminal_state per week" in dom and "Top switch ports" in dom
    assert len(re.findall(r'<rect class="bar"', dom)) >= 20
    assert "leaf-07:17" in dom
    charts = (0, 90, 1400, 400)  # the chart row above the table
    for state in ("hardware_failure", "infrastructure_failure", "application_failure", "scheduler_action", "unknown"):
        assert pixels(img, STATE_COLORS[state], charts) > 200, state  # each state's bars are on screen
    # the switch-port chart's bars (orange) and the top port's bar the longest: > 5x the others' pixels in that card
    assert pixels(img, "#ff7f0e", (1050, 90, 1400, 400)) > 1000
    print(f"\n/ui load: {min(timings) * 1000:.0f} ms best of 3, {max(timings) * 1000:.0f} ms worst")


def test_diagnosis_page_timeline_marks_the_root(site, tmp_path):
    items = httpx.get(f"{site}/v1/diagnoses", params={"terminal_state": "hardware_failure", "limit": 50}).json()[
        "items"
    ]
    target = next(i for i in items if i["root_node"])
    url = f"{site}/ui/diagnoses/{target['diagnosis_id']}"
    t = time.perf_counter()
    assert httpx.get(url, timeout=30).status_code == 200
    elapsed = time.perf_counter() - t
    dom, img = shoot(url, tmp_path / "diagnosis.png", tmp_path, size=(1400, 1400))
    assert 'aria-label="symptom timeline"' in dom and target["root_node"] in dom
    marks = re.findall(r'<rect class="mark"[^>]*fill="(#[0-9a-f]{6})"', dom)
    assert ROLE_COLORS["root"] in marks
    assert pixels(img, ROLE_COLORS["root"]) > 30  # the root's mark (and its pill) are drawn
    # the root's host is the first row of the timeline
    rows = re.findall(r'<text x="0" y="\d+" font-size="12"[^>]*>([^<]+)</text>', dom)
    assert rows[0] == target["root_node"]
    print(f"\n/ui/diagnoses/<id> load: {elapsed * 1000:.0f} ms")


def test_filters_and_escaping(site):
    page = httpx.get(
        f"{site}/ui", params={"terminal_state": "hardware_failure", "node": "", "cluster": "", "since": "", "until": ""}
    ).text
    assert "scheduler_action</span>" not in page.split("<table>")[1]
    hostile = httpx.get(f"{site}/ui", params={"cluster": "<script>alert(1)</script>"})
    assert hostile.status_code == 422 and "<script>alert" not in hostile.text
    assert httpx.get(f"{site}/ui", params={"since": "last tuesday"}).status_code == 422
    r = httpx.get(f"{site}/ui")
    assert "default-src 'none'" in r.headers["content-security-policy"]
