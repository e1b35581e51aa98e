"""The dashboard in a real headless Chromium (Debian's package; .ci/run installs it), against
`attribution serve`'s app on a real socket over the seeded warehouse (tests/conftest.py): the
pages render, the charts are drawn with data (pixels of their colours in the screenshot) on a true
time axis, every host, switch port, XID and symptom leads to its filtered list (followed by
clicking, as a user does), the charts follow the filters, paging reaches every row, relative times
are taken, and the page load times are printed. One browser for the module, driven over the
DevTools protocol; each page's screenshot is checked."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn

from tests.services.prometheus import free_port
from tests.waiting import wait_until
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
    "--hide-scrollbars",
]


def chromium() -> str:
    path = shutil.which("chromium")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: .ci/run must install it")
    pytest.skip("chromium not installed (apt-get install chromium)")


class Browser:
    """One headless Chromium, one tab, driven over the DevTools protocol."""

    def __init__(self, profile: Path):
        from websockets.sync.client import connect

        self.proc = subprocess.Popen(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        active = profile / "DevToolsActivePort"  # Chromium writes the port it chose here
        try:
            wait_until(
                lambda: active.exists() and len(active.read_text().splitlines()) >= 2,
                "Chromium to write its DevTools port",
                gone=self.proc,
            )
        except BaseException:
            self.close()
            raise
        port = active.read_text().splitlines()[0]
        tabs = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in tabs if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, proxy=None, open_timeout=30)
        self.seq = 0
        self.events: list[dict] = []
        self.call("Page.enable")

    def call(self, method: str, **params):
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.seq:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for i, msg in enumerate(self.events):
                if msg.get("method") == event:
                    del self.events[: i + 1]
                    return
            self.events.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {event} within {timeout} s")
            self.events.append(json.loads(self.ws.recv(timeout=left)))

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in out, out["exceptionDetails"]
        return out["result"].get("value")

    def open(self, url: str, size=(1400, 1000)) -> tuple[str, float]:
        """Navigate and wait for the load; (the DOM, seconds to load)."""
        self.call(
            "Emulation.setDeviceMetricsOverride", width=size[0], height=size[1], deviceScaleFactor=1, mobile=False
        )
        self.events.clear()
        t = time.perf_counter()
        nav = self.call("Page.navigate", url=url)
        assert "errorText" not in nav, nav
        self.wait_for("Page.loadEventFired")
        return self.js("document.documentElement.outerHTML"), time.perf_counter() - t

    def click(self, selector: str, index: int = 0) -> str:
        """Click the element as a user does (the mouse at its centre); answer the URL it led to."""
        box = self.js(
            f"(() => {{ const e = document.querySelectorAll({json.dumps(selector)})[{index}];"
            " if (!e) return null; e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        assert box, f"nothing matches {selector} [{index}]"
        self.events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
        self.wait_for("Page.loadEventFired")
        return self.js("location.href")

    def screenshot(self, out: Path):
        from PIL import Image

        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return Image.open(out).convert("RGB")

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def site(seeded_warehouse):
    yield from serve(seeded_warehouse)


@pytest.fixture(scope="module")
def memory_site(tmp_path_factory):
    """The worked example's host failing in three jobs, diagnosed one after the other (fleet memory)."""
    from tests.conftest import WORKED
    from tests.helpers import bundle_copy, diagnose

    tmp = tmp_path_factory.mktemp("memory-site")
    for job in ("4191701", "4191702", "4191703"):
        diagnose(bundle_copy(WORKED, tmp / job, job), warehouse=tmp / "w.duckdb")
    yield from serve(tmp / "w.duckdb")


def serve(warehouse):
    saved = os.environ.pop("ATTRIBUTION_API_TOKEN", None)  # a trusted-network dashboard: no sign-in page in the way
    app = create_app(Config(warehouse=str(warehouse)))
    if saved is not None:
        os.environ["ATTRIBUTION_API_TOKEN"] = saved
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the dashboard's server to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def pixels(img, hex_color: str, box=None) -> int:
    want = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    region = img.crop(box) if box else img
    return sum(n for n, rgb in region.getcolors(maxcolors=1 << 20) if rgb == want)


def pager(dom: str) -> str:
    m = re.search(r'<p class="?pager"?>([^<]*)', dom)
    assert m, "no pager"
    return m.group(1).strip()


def total_of(dom: str) -> int:
    return int(pager(dom).rsplit(" of ", 1)[1])


def rows_of(dom: str) -> list[str]:
    return re.findall(r'<a href="/ui/diagnoses/([0-9a-f-]{36})">', dom)


def bars(dom: str, chart: str) -> list[tuple[str, float, float, str]]:
    """(period, x, width, fill) of the bars of the chart titled `chart`."""
    svg = dom.split(f'aria-label="{chart}"', 1)[1].split("</svg>", 1)[0]
    return [
        (p, float(x), float(w), fill)
        for p, x, w, fill in re.findall(
            r'<rect class="bar" data-period="([0-9-]+)" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)" '
            r'height="[0-9.]+" fill="(#[0-9a-f]{6})"',
            svg,
        )
    ]


def api(site: str, **params) -> dict:
    return httpx.get(f"{site}/v1/diagnoses", params={"limit": 1000, **params}, timeout=30).json()


def test_list_page_draws_the_charts_with_data(site, browser, shots):
    timings = []
    for _ in range(3):
        t = time.perf_counter()
        assert httpx.get(f"{site}/ui", timeout=30).status_code == 200
        timings.append(time.perf_counter() - t)
    dom, loaded = browser.open(f"{site}/ui")
    img = browser.screenshot(shots / "list.png")
    assert "Diagnoses by terminal_state per week" in dom and "Top switch ports" in dom
    assert "XIDs per week" in dom and "Failures per host per week" in dom
    assert len(re.findall(r'<rect class="bar"', dom)) >= 20
    assert len(re.findall(r'<rect class="cell"', dom)) >= 5
    assert "leaf-07:17" in dom
    charts = (0, 90, 1400, 400)  # the chart row above the table
    for state in ("hardware_failure", "infrastructure_failure", "application_failure", "scheduler_action", "unknown"):
        assert pixels(img, STATE_COLORS[state], charts) > 200, state  # each state's bars are on screen
    # the switch-port chart's bars (orange) and the top port's bar the longest: > 5x the others' pixels in that card
    assert pixels(img, "#ff7f0e", (1050, 90, 1400, 400)) > 1000
    assert pixels(img, "#d62728", (0, 420, 1400, 720)) > 300  # the XID bars and the host x week cells, second row
    print(
        f"\n/ui load: {min(timings) * 1000:.0f} ms best of 3, {max(timings) * 1000:.0f} ms worst; "
        f"in Chromium {loaded * 1000:.0f} ms; screenshot {shots / 'list.png'}"
    )


def on_a_time_axis(day_bars: list[tuple[str, float, float, str]], unit_days: int) -> tuple[float, float]:
    """Every bar at x0 + (its period - the first) x slot: (x0, slot), from the first and last bars."""
    when = [(datetime.fromisoformat(p), x) for p, x, _, _ in day_bars]
    (t0, x0), (t1, x1) = min(when), max(when)
    slot = (x1 - x0) / ((t1 - t0).days / unit_days)
    for t, x in when:
        assert abs(x0 + (t - t0).days / unit_days * slot - x) < 0.5, (t, x)  # on the line, to the rounded pixel
    return x0, slot


def test_the_time_axis_is_true(site, browser):
    """A bar's place is its period's: weeks with no diagnosis keep their slot (the gap between two
    bars is the time between them), and a `since` window runs to now."""
    dom, _ = browser.open(f"{site}/ui")
    state_bars = bars(dom, "Diagnoses by terminal_state per week")
    periods = sorted({p for p, *_ in state_bars})
    _, slot = on_a_time_axis(state_bars, 7)
    assert abs(slot - (state_bars[0][2] + 1)) < 0.2  # a bar is one slot wide, less a pixel
    gaps = [(datetime.fromisoformat(b) - datetime.fromisoformat(a)).days // 7 for a, b in zip(periods, periods[1:])]
    assert max(gaps) >= 3  # the seeded fleet has empty weeks: they keep their slots, empty
    assert (datetime.fromisoformat(periods[-1]) - datetime.fromisoformat(periods[0])).days // 7 + 1 > len(periods)
    # a relative window: per day, from 60 days ago to today (empty days included)
    dom, _ = browser.open(f"{site}/ui?since=60d")
    x0, slot = on_a_time_axis(bars(dom, "Diagnoses by terminal_state per day"), 1)
    start = (datetime.now(timezone.utc) - timedelta(days=60)).date()
    first = min(datetime.fromisoformat(p).date() for p, *_ in bars(dom, "Diagnoses by terminal_state per day"))
    assert abs(x0 - (first - start).days * slot - 30) < 0.5  # the axis starts 60 days ago ...
    assert round((640 - 40) / slot) == 61  # ... and has a slot for each day up to today


def ui_total(site: str, **params) -> int:
    return total_of(httpx.get(f"{site}/ui", params=params, timeout=30).text)


def test_every_host_port_xid_and_symptom_leads_to_its_filtered_list(site, browser, shots):
    dom, _ = browser.open(f"{site}/ui")
    # a bar of the host and port charts links to a list of as many diagnoses as the bar counts
    for chart, key in (("Top hosts (roots and affected)", "node"), ("Top switch ports", "port")):
        svg = dom.split(f'aria-label="{chart}"', 1)[1].split("</svg>", 1)[0]
        entries = re.findall(
            r'<a href="/ui\?([^"]+)"><text[^>]*>[^<]*</text><rect[^>]*><title>([^<]+): (\d+)</title>', svg
        )
        assert len(entries) >= 3, chart
        for query, label, n in entries[:3] + entries[-1:]:  # the top three and the last
            label = unescape(label)
            assert parse_qs(unescape(query)) == {key: [label]}
            listed = api(site, node=label)["total"] if key == "node" else ui_total(site, port=label)
            assert listed == int(n), (chart, label, listed, n)
    # ... clicked: the top port's bar
    url = browser.click('svg[aria-label="Top switch ports"] a rect')
    assert parse_qs(urlsplit(url).query) == {"port": ["leaf-07:17"]}
    dom = browser.js("document.documentElement.outerHTML")
    assert total_of(dom) == 5  # the 5 the bar counted: every network_link root cabled under the bad port
    img = browser.screenshot(shots / "port.png")
    assert pixels(img, "#ff7f0e", (1050, 90, 1400, 400)) > 500
    under_port = rows_of(dom)
    # a host in a heatmap row, and an XID in its chart's legend
    browser.open(f"{site}/ui")
    url = browser.click('svg[aria-label^="Failures per host"] a text')
    host = parse_qs(urlsplit(url).query)["node"][0]
    assert total_of(browser.js("document.documentElement.outerHTML")) == api(site, node=host)["total"] >= 1
    browser.open(f"{site}/ui")
    url = browser.click("div.card a span.pill", index=len(STATE_COLORS))  # the states' legend, then the XIDs'
    xid = parse_qs(urlsplit(url).query)["symptom"][0]
    assert xid.startswith("xid_")
    dom = browser.js("document.documentElement.outerHTML")
    assert total_of(dom) == api(site, symptom=xid)["total"] >= 1
    xid_svg = dom.split('aria-label="XIDs per', 1)[1].split("</svg>", 1)[0]
    # the XID chart, filtered, counts that XID in every listed attempt (beside the others those attempts had)
    assert sum(int(n) for n in re.findall(rf"<title>[0-9-]+ {xid}: (\d+)</title>", xid_svg)) == total_of(dom)
    # a symptom in the table
    browser.open(f"{site}/ui")
    url = browser.click('td a.muted[href*="symptom="]')
    symptom = parse_qs(urlsplit(url).query)["symptom"][0]
    assert total_of(browser.js("document.documentElement.outerHTML")) == api(site, symptom=symptom)["total"] >= 1
    # a diagnosis: its hosts, its switch port and its symptoms are links; its port leads back to the 5
    dom, _ = browser.open(f"{site}/ui/diagnoses/{under_port[0]}")
    doc = httpx.get(f"{site}/v1/diagnoses/{under_port[0]}").json()
    for node in doc["affected_nodes"] + [doc["root_cause"]["node"]]:
        assert f'<a href="/ui?node={node}">{node}</a>' in dom
    symptom_rows = re.findall(r"<tr><td><span class=\"pill\"[^>]*>[a-z]+</span></td><td>(.*?)</td>", dom)
    assert symptom_rows and all(c.startswith('<a href="/ui?symptom=') for c in symptom_rows)
    url = browser.click('b.ports a[href*="port="]')
    assert parse_qs(urlsplit(url).query) == {"port": ["leaf-07:17"]}
    assert total_of(browser.js("document.documentElement.outerHTML")) == 5


def test_charts_follow_the_filters(site, browser, shots):
    dom, _ = browser.open(f"{site}/ui?terminal_state=hardware_failure")
    fills = {fill for *_, fill in bars(dom, "Diagnoses by terminal_state per week")}
    assert fills == {STATE_COLORS["hardware_failure"]}
    img = browser.screenshot(shots / "hardware.png")
    assert pixels(img, STATE_COLORS["application_failure"], (40, 120, 680, 345)) == 0  # no blue bar (the pill is below)
    assert total_of(dom) == api(site, terminal_state="hardware_failure")["total"]
    host = api(site, terminal_state="hardware_failure")["items"][0]["root_node"]
    dom, _ = browser.open(f"{site}/ui?node={host}")
    svg = dom.split('aria-label="Top hosts (roots and affected)"', 1)[1].split("</svg>", 1)[0]
    assert re.findall(r"<title>([^<]+): \d+</title>", svg)[0] == host  # the filtered host leads its chart
    cells = re.findall(r'<rect class="cell"[^>]*><title>([^ ]+) ', dom)
    assert host in cells


def test_paging_reaches_every_row(site, browser):
    everything = api(site)
    assert everything["total"] == len(everything["items"]) > 20
    dom, _ = browser.open(f"{site}/ui?per_page=10")
    seen, pages = rows_of(dom), [pager(dom)]
    while 'class="pager"' in dom and ">next<" in dom:
        url = browser.click("p.pager a:last-child")
        assert parse_qs(urlsplit(url).query)["per_page"] == ["10"]
        dom = browser.js("document.documentElement.outerHTML")
        seen += rows_of(dom)
        pages.append(pager(dom))
    n = everything["total"]
    assert pages[0] == f"1-10 of {n}" and pages[-1] == f"{(n - 1) // 10 * 10 + 1}-{n} of {n}", pages
    assert seen == [i["diagnosis_id"] for i in everything["items"]]  # every row once, newest first
    # the API pages the same way, past any fixed cap
    got, offset = [], 0
    while True:
        page = httpx.get(f"{site}/v1/diagnoses", params={"limit": 7, "offset": offset}).json()
        got += [i["diagnosis_id"] for i in page["items"]]
        offset += 7
        if offset >= page["total"]:
            break
    assert got == seen


def test_relative_times_are_taken(site, browser):
    since = (datetime.now(timezone.utc) - timedelta(days=60)).isoformat()
    want = [i["diagnosis_id"] for i in api(site, since=since)["items"]]
    dom, _ = browser.open(f"{site}/ui?since=60d")
    assert rows_of(dom) == want and total_of(dom) == len(want) < api(site)["total"]
    assert [i["diagnosis_id"] for i in api(site, since="60d")["items"]] == want
    assert 'name="since" placeholder="7d or 2026-11-01T00:00:00Z" value="60d"' in dom  # the form keeps it


def test_diagnosis_page_timeline_marks_the_root(site, browser, shots):
    items = httpx.get(f"{site}/v1/diagnoses", params={"terminal_state": "hardware_failure", "limit": 50}).json()[
        "items"
    ]
    target = next(i for i in items if i["root_node"])
    url = f"{site}/ui/diagnoses/{target['diagnosis_id']}"
    t = time.perf_counter()
    assert httpx.get(url, timeout=30).status_code == 200
    elapsed = time.perf_counter() - t
    dom, _ = browser.open(url, size=(1400, 1400))
    img = browser.screenshot(shots / "diagnosis.png")
    assert 'aria-label="symptom timeline"' in dom and target["root_node"] in dom
    marks = re.findall(r'<rect class="mark"[^>]*fill="(#[0-9a-f]{6})"', dom)
    assert ROLE_COLORS["root"] in marks
    assert pixels(img, ROLE_COLORS["root"]) > 30  # the root's mark (and its pill) are drawn
    # the root's host is the first row of the timeline, and a link to its list
    rows = re.findall(r'<text x="0" y="\d+" font-size="12"[^>]*>([^<]+)</text>', dom)
    assert rows[0] == target["root_node"]
    assert f'<a href="/ui?node={target["root_node"]}"><text x="0"' in dom
    url = browser.click('p.root a[href*="node="]')
    assert parse_qs(urlsplit(url).query) == {"node": [target["root_node"]]}
    print(f"\n/ui/diagnoses/<id> load: {elapsed * 1000:.0f} ms")


def test_diagnosis_page_shows_the_history_of_the_blamed_host_and_the_escalation(memory_site, browser, shots):
    from workload_attribution.contracts.identity import AttemptId

    ids = {job: AttemptId(cluster="eos", scheduler="slurm", job_id=job).diagnosis_id for job in ("4191701", "4191703")}
    doc = httpx.get(f"{memory_site}/v1/diagnoses/{ids['4191703']}", timeout=30).json()  # the API carries it too
    assert doc["history"]["escalation"]["to_action"] == "drain_node" and doc["recommended_action"] == "drain_node"
    dom, _ = browser.open(f"{memory_site}/ui/diagnoses/{ids['4191703']}", size=(1400, 2400))
    img = browser.screenshot(shots / "history.png")
    rows = browser.js(
        "[...document.querySelectorAll('table.history tr')].slice(1).map(r => [...r.cells].map(c => c.innerText))"
    )
    host = next(r for r in rows if r[0].startswith("gb-r12-n04"))
    assert host[1:5] == ["2", "2", "0", "0"] and "eos 4191701" in host[6] and "eos 4191702" in host[6]
    assert any(r[0].startswith("leaf-12:20") for r in rows)  # its switch port
    banner = browser.js("document.querySelector('p.escalation').innerText")
    assert banner.startswith("Escalated: drain_and_reset_gpu → drain_node + hardware ticket.")
    assert "gb-r12-n04 is root for the 3rd time in 30 days" in banner
    shown = browser.js(
        "(() => { const r = document.querySelector('table.history').getBoundingClientRect();"
        " return r.width > 400 && r.height > 40; })()"
    )
    assert shown and pixels(img, STATE_COLORS["hardware_failure"]) > 50  # the banner's bar and the verdict's pill
    url = browser.click("table.history a[href^='/ui/diagnoses/']")
    assert urlsplit(url).path == f"/ui/diagnoses/{ids['4191701']}"  # the latest listed first: job id order on a tie
    assert "job 4191701 attempt 0" in browser.js("document.querySelector('h1').innerText")
    first = browser.js("document.querySelector('p.escalation')")
    assert first is None  # the first failure escalated nothing


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
