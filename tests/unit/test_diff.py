"""`attribution diff`: log templates of two bundles, and what one logged that the other did not."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.conftest import ROOT, WORKED
from workload_attribution.connectors.bundle import TEXT_SOURCES, log_files
from workload_attribution.staging.files import MAX_LINE, decode
from workload_attribution.tasks import templates as templates_module
from workload_attribution.tasks.templates import VARIABLE, diff, mask_expression, templates_of

HOSTS = ["gb-r12-n01", "gb-r12-n02", "gb-r12-n03", "gb-r12-n04", "gb-r12-n05", "gb-r12-n06"]

# Planted on one host of the "bad" copy: a message the healthy copy never logs, its numbers, hex
# and paths different on every line.
APP_PLANT = (
    "[rank{r}]:[2026-11-20 11:{m:02d}:10] gb-r12-n02:{pid}:{tid} [{g}] misc/shmutils.cc:{ln} NCCL WARN "
    "Error: failed to extend /dev/shm/nccl-{tag} to {size} bytes"
)
SYS_PLANT = (
    "2026-11-20T11:{m:02d}:00.000000+00:00 gb-r12-n05 kernel: mlx5_core 0000:{bus:02x}:00.1: "
    "mlx5_cmd_out_err:{ln}: QUERY_VPORT_COUNTER(0x{op:x}) op_mod(0x0) failed, status bad parameter(0x3), "
    "syndrome (0x{syn:x}), err(-22)"
)


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "workload_attribution", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the worked example with the two messages planted, a healthy copy)."""
    bad, good = tmp_path / "bad", tmp_path / "good"
    shutil.copytree(WORKED, bad)
    shutil.copytree(WORKED, good)
    with open(bad / "logs/app/gb-r12-n02.log", "a") as f:
        for i in range(3):
            f.write(
                APP_PLANT.format(
                    r=4 + i,
                    m=10 + i,
                    pid=3004 + i,
                    tid=3104 + i,
                    g=i,
                    ln=90 + i,
                    tag=f"{0x5AB3 * (i + 1):x}",
                    size=2**20 * (i + 9),
                )
                + "\n"
            )
    with open(bad / "logs/syslog/gb-r12-n05.log", "a") as f:
        for i in range(2):
            f.write(SYS_PLANT.format(m=20 + i, bus=0x1A + i, ln=800 + i, op=0x770 + i, syn=0x6A0F1B + i) + "\n")
    return bad, good


def masked(*lines: str, hosts: list[str] = HOSTS) -> list[str]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest($l) AS line, generate_subscripts($l, 1) AS i", {"l": list(lines)})
    return [r[0] for r in con.execute(f"SELECT {mask_expression('line', hosts)} FROM t ORDER BY i").fetchall()]


def test_one_message_is_one_template_whatever_its_numbers_hosts_and_paths():
    same = masked(
        "2026-11-20T12:02:44.1Z gb-r12-n01 app[3001]: rank 3 read /data/shard-0017/part.bin at 0x7f3a10 "
        "from 10.12.1.20:5000 (id 0b7c8a9e-1f2d-4c3b-9a8e-7d6c5b4a3f21) in 1.25 s",
        "Nov 21 03:15:09.000001 gb-r12-n06 app[77]: rank 12 read /scratch/x/y/z.bin at 0xdeadbeef "
        "from 192.168.0.7:61000 (id 123e4567-e89b-12d3-a456-426614174000) in 12 s",
    )
    assert same[0] == same[1], same
    assert "gb-r12" not in same[0] and "/data" not in same[0] and VARIABLE in same[0]
    different = masked(
        "gb-r12-n01 kernel: NVRM: Xid (PCI:0008:01:00): 79, GPU has fallen off the bus.",
        "gb-r12-n01 kernel: NVRM: Xid (PCI:0008:01:00): 79, GPU has fallen off the bus!",
        "gb-r12-n01 kernel: NVRM: Xid (PCI:0008:01:00): 48, An uncorrectable double bit error",
        "gb-r12-n01 kernel: mlx5_core 0000:1a:00.1: port module event: module 0, Cable unplugged",
    )
    assert len(set(different)) == 4, different


# Lines alike but for their digits (a host of another attempt named like these, `1x2f` beside
# `0x1f`), and what a reader stumbles on: CRLF, bad bytes and NULs, blank and all-space lines.
SHAPES = [
    "2026-11-20T13:{m:02d}:00Z gb-r12-n0{h} app[{pid}]: peer gb-r12-n{peer:02d} reg 0x{a:x} {d}x{b:x}f moved",
    "2026-11-20T13:{m:02d}:01Z gb-r12-n0{h} app[{pid}]: 10.0.{h}.{pid:d}:{port} said {d}{d}.{m} in /x/y{h}/z\r",
    "2026-11-20T13:{m:02d}:02Z gb-r12-n0{h} app[{pid}]: odd bytes \udcff\x00 at step {pid}",
    "",
    "   ",
]


def test_templates_are_counted_by_shape_as_if_each_line_were_masked(tmp_path, monkeypatch):
    """templates_of masks one line per shape (its digits as 0) and counts the rest: the same
    templates, counts and first lines as masking every line, across pieces and batches."""
    bundle = tmp_path / "b"
    shutil.copytree(WORKED, bundle)
    for n, host in enumerate(HOSTS[:3]):
        with open(bundle / f"logs/app/{host}.log", "ab") as f:
            for i in range(400):
                line = SHAPES[i % len(SHAPES)].format(
                    m=i // 7, h=n + 1, pid=7 + i * 13, peer=i % 12, a=i, b=i % 9, d=i % 10, port=1000 + i
                )
                f.write(line.encode("utf-8", "surrogateescape") + b"\n")
    monkeypatch.setattr(templates_module, "PIECE_BYTES", 2048)  # many pieces, many batches
    got = templates_of(bundle)
    con = duckdb.connect()
    con.execute("CREATE TABLE lines (ref VARCHAR, lineno BIGINT, x VARCHAR)")
    for source in TEXT_SOURCES:
        for f in log_files(bundle, source)[0]:
            rows = [(f.ref, i + 1, decode(raw)[0]) for i, raw in enumerate(f.path.read_bytes().split(b"\n"))]
            con.executemany("INSERT INTO lines VALUES (?, ?, ?)", rows)
    each = {
        (template, ref): (int(n), first)
        for template, ref, n, first in con.execute(
            f"""SELECT {mask_expression(f"left(rtrim(x, chr(13)), {MAX_LINE})", HOSTS)} AS template, ref,
                       count(*), min(lineno) FROM lines WHERE trim(x) <> '' GROUP BY ALL"""
        ).fetchall()
    }
    counts: dict[str, int] = {}
    for (template, _), (n, _) in each.items():
        counts[template] = counts.get(template, 0) + n
    assert {k: t.count for k, t in got.templates.items()} == counts
    wrong = [(k, t.ref, t.line, each[(k, t.ref)]) for k, t in got.templates.items() if each[(k, t.ref)][1] != t.line]
    assert not wrong, wrong
    moved = [t for k, t in got.templates.items() if k.endswith("moved")]
    assert len(moved) == 1 and moved[0].count == 3 * 80, moved  # one template whatever the peer and digits


def test_the_planted_messages_are_what_the_bad_copy_logged_alone(tmp_path):
    bad, good = planted(tmp_path)
    r = run("diff", str(bad), "--against", str(good), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["new_total"] == 2 and doc["changed_total"] == 0, doc
    first, second = doc["new"]
    assert first["count"] == 3 and first["level"] == "error" and first["source"] == "app"
    assert first["first"] == "logs/app/gb-r12-n02.log:11" and "shmutils.cc" in first["first_line"]
    assert first["first_time"] == "2026-11-20T10:10:10+00:00"  # the attempt's zone: Europe/Berlin
    assert second["count"] == 2 and second["source"] == "syslog" and "QUERY_VPORT_COUNTER" in second["template"]
    assert second["first"].startswith("logs/syslog/gb-r12-n05.log:")
    # the healthy copy logged nothing the planted one did not: every one of its templates matches
    r = run("diff", str(good), "--against", str(bad), "--json")
    assert r.returncode == 0, r.stderr
    back = json.loads(r.stdout)
    assert back["new_total"] == 0 and back["changed_total"] == 0, back
    assert back["attempt"]["templates"] == doc["against"]["templates"] == doc["attempt"]["templates"] - 2


def test_text_output_has_a_header_and_the_first_n(tmp_path):
    bad, good = planted(tmp_path)
    r = run("diff", str(bad), "--against", str(good), "--limit", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{bad} against {good}: 2 template(s) logged only by {bad}")
    assert "shmutils.cc" in lines[1] and lines[1].split()[:2] == ["error", "3x"]
    assert "logs/app/gb-r12-n02.log:11: [rank4]:" in lines[2]
    assert lines[3] == "  ... 1 more (--limit)" and len(lines) == 4
    assert r.stderr == ""  # progress only on a terminal


def test_compressed_logs_are_read_as_a_diagnosis_reads_them(tmp_path):
    bad, good = planted(tmp_path)
    app = bad / "logs/app/gb-r12-n02.log"
    (bad / "logs/app/gb-r12-n02.log.gz").write_bytes(gzip.compress(app.read_bytes()))
    app.unlink()
    a, b = templates_of(bad), templates_of(good)
    assert a.lines == b.lines + 5 and [t.count for t in diff(a, b).new] == [3, 2]


def test_bad_input_is_exit_2_with_one_line(tmp_path):
    for args, words in (
        (["diff", str(tmp_path), "--against", str(WORKED)], "not a bundle"),
        (["diff", str(WORKED), "--against", "last-good", "--warehouse", str(tmp_path / "w.duckdb")], "ended well"),
        (["diff", "eos/4191701#0", "--against", str(WORKED), "--warehouse", str(tmp_path / "w")], "not a bundle"),
        (["diff", str(WORKED), "--against", str(WORKED), "--limit", "0"], "--limit 0"),
    ):
        r = run(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "attempt.yaml").write_text("cluster: c\n")
    r = run("diff", str(tmp_path), "--against", str(WORKED))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "attempt.yaml" in r.stderr


def test_the_caps_are_reported_when_hit(tmp_path):
    bad, good = planted(tmp_path)
    capped = templates_of(bad, max_templates=5)
    assert len(capped.templates) == 5 and capped.templates_cap_hit and capped.lines_over_template_cap > 0
    assert templates_of(bad, max_lines=50).lines == 50
    r = run("diff", str(bad), "--against", str(good), "--max-templates", "5")
    assert r.returncode == 0, r.stderr
    assert f"note: {bad}: template cap hit, 5 templates kept" in r.stdout
    r = run("diff", str(bad), "--against", str(good), "--max-lines", "100")
    assert r.returncode == 0, r.stderr
    assert f"note: {bad}: line cap hit, 100 lines read" in r.stdout
    r = run("diff", str(bad), "--against", str(good), "--json", "--max-templates", "5")
    doc = json.loads(r.stdout)
    assert doc["attempt"]["templates_cap_hit"] and not doc["attempt"]["lines_cap_hit"]


def test_a_template_whose_rate_changed_tenfold_is_shown_apart(tmp_path):
    bad, good = planted(tmp_path)
    chatty = "[Nov 20 2026 11:{m:02d}:00] [INFO] [tid 1808] multicast group {i} is allocated."
    with open(bad / "logs/fabricmanager/gb-r12-n04.log", "a") as f:
        f.writelines(chatty.format(m=i, i=i % 7) + "\n" for i in range(30))
    r = run("diff", str(bad), "--against", str(good), "--json")
    doc = json.loads(r.stdout)
    assert doc["new_total"] == 2 and doc["changed_total"] == 1, doc
    (changed,) = doc["changed"]
    assert "multicast group" in changed["template"] and changed["count"] == 31 and changed["against_count"] == 1
    assert changed["factor"] >= 10
    r = run("diff", str(bad), "--against", str(good))
    assert "changed 10x or more (per line read): 1" in r.stdout and "31x (against 1x)" in r.stdout
    # the other way round it is a tenth of the rate: changed too, no new template
    back = json.loads(run("diff", str(good), "--against", str(bad), "--json").stdout)
    assert back["new_total"] == 0 and back["changed_total"] == 1 and back["changed"][0]["factor"] < 0.1


def test_what_a_diagnosis_refuses_to_read_is_refused_and_named(tmp_path):
    bad, good = planted(tmp_path)
    os.mkfifo(bad / "logs/app/gb-r12-n07.log")  # would block a reader forever
    (bad / "logs/syslog/gb-r12-n07.log").symlink_to("/etc/passwd")
    r = run("diff", str(bad), "--against", str(good))
    assert r.returncode == 0, r.stderr
    assert f"note: {bad}: not read: logs/app/gb-r12-n07.log: a FIFO, not read" in r.stdout
    assert f"note: {bad}: not read: logs/syslog/gb-r12-n07.log: symlink outside the bundle, not read" in r.stdout
    assert "root:" not in r.stdout
