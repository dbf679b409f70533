"""`gputop report`'s data and page, without a browser: every recorded step reaches the page,
the page names nothing outside itself, and bad input is one line with exit 2."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from array import array
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from gputop.app import cli
from gputop.export.report.data import report_data
from gputop.export.report.page import render_page, write_report
from gputop.recording.reader import Recording
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import frame, trainer_with_workers
from tests.helpers.synthetic_recording import (
    CHECKPOINT_EVERY,
    STEPS_PER_TICK,
    write_synthetic_recording,
)

STEPS = 2_000


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run.sqlite"
    write_synthetic_recording(str(path), STEPS)
    return path


def _floats(packed: str, code: Literal["f", "d"] = "f") -> list[float]:
    values = array(code)
    values.frombytes(base64.b64decode(packed))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _data(path: Path) -> dict:
    with Recording(str(path)) as recording:
        return report_data(recording)


def test_every_recorded_step_reaches_the_page_with_its_phases(recording: Path) -> None:
    data = _data(recording)
    with sqlite3.connect(recording) as db:
        stored = db.execute("SELECT step, duration_ns, data_ns FROM steps ORDER BY step").fetchall()
    (trainer,) = data["trainers"]
    assert trainer["steps"] == len(stored) == STEPS
    durations = _floats(trainer["duration"])
    assert durations == pytest.approx([d / 1e6 for _, d, _ in stored], rel=1e-6)
    assert _floats(trainer["phases"]["data"]) == pytest.approx([d / 1e6 for *_, d in stored],
                                                               rel=1e-6)
    assert max(durations) == durations[CHECKPOINT_EVERY]  # the checkpoint step is kept
    ends = _floats(trainer["end"], "d")
    ticks = _floats(data["t"], "d")
    assert ends == sorted(ends)
    # on the ticks' clock: each step ended after the tick before the one that carried it
    assert all(ticks[n // STEPS_PER_TICK - 1] < end <= ticks[n // STEPS_PER_TICK]
               for n, end in enumerate(ends) if n >= STEPS_PER_TICK)


def test_each_tick_reaches_the_page_once_per_gpu_and_trainer(recording: Path) -> None:
    data = _data(recording)
    ticks = STEPS // STEPS_PER_TICK
    assert data["ticks"] == ticks
    assert len(_floats(data["t"], "d")) == ticks
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    assert all(len(_floats(g["util"])) == ticks for g in data["gpus"])
    assert len(_floats(data["workers"][0]["cpu"])) == ticks
    assert len(_floats(data["membw"]["pressure"])) == ticks


def test_advice_is_a_span_from_the_tick_it_appeared_to_the_tick_it_went(recording: Path) -> None:
    data = _data(recording)
    (advice,) = data["advice"]
    with sqlite3.connect(recording) as db:
        start = db.execute("SELECT min(time) FROM frames").fetchone()[0]
        shown, gone = (db.execute("SELECT f.time FROM advice a JOIN frames f ON f.id = a.frame "
                                  "WHERE a.shown = ?", (flag,)).fetchone()[0] for flag in (1, 0))
    (span,) = advice["spans"]
    assert advice["id"] == "gpu-starved"
    assert span[:3] == [pytest.approx(shown - start), pytest.approx(gone - start), "critical"]


def test_settings_are_the_probes_as_recorded(recording: Path) -> None:
    (trainer,) = _data(recording)["trainers"]
    (settings,) = trainer["settings"]
    assert dict(map(tuple, settings["values"])) == {
        "num_workers": 4, "pin_memory": True, "batch_size": 256, "prefetch_factor": 2,
        "persistent_workers": True, "num_threads": 8, "device": "cuda:0"}


def test_the_page_loads_nothing_and_allows_only_its_own_script_and_style(recording: Path) -> None:
    page = render_page(_data(recording))
    assert not re.search(r"\b(src|href)\s*=", page, re.I)
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page.split("report-data")[0])
    policy = re.search(r'Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    assert "default-src 'none'" in policy[1]
    inline = re.findall(r"<script>(.*?)</script>", page, re.S)
    style = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(inline) == 2 and len(style) == 1
    for code in [*inline, *style]:
        digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy[1]


@pytest.mark.parametrize("hostname", ["</script><script>alert(1)</script>",
                                      "<!--<script>", "</SCRIPT >"])
def test_text_from_the_recording_cannot_end_the_data_script(tmp_path: Path,
                                                            hostname: str) -> None:
    path = tmp_path / "odd.sqlite"
    writer = RecordWriter(open_record(str(path)))
    writer.write(frame())
    writer.db.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE texts SET text = json_set(text, '$.hostname', ?) "
                   "WHERE text LIKE '%hostname%'", (hostname,))
    page = render_page(_data(path))
    payload = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in payload
    assert json.loads(payload)["host"]["hostname"] == hostname


def test_a_trainers_workers_are_counted_at_their_most(tmp_path: Path) -> None:
    """Workers exit before their trainer: the legend counts those it had, not the last
    tick's none."""
    path = tmp_path / "run.sqlite"
    rows, group = trainer_with_workers(100, 3, 50.0)
    writer = RecordWriter(open_record(str(path)))
    writer.write(replace(frame(processes=rows, trainers=(group,)), time=1.0))
    writer.write(replace(frame(processes=rows[:1], trainers=(replace(group, worker_pids=()),)),
                         time=2.0))
    writer.db.close()
    assert [(w["pid"], w["workers"]) for w in _data(path)["workers"]] == [(100, 3)]


def _report(*args: str) -> tuple[int, str]:
    """Run `gputop report` in this process: exit code and what it wrote to stderr."""
    from contextlib import redirect_stderr
    from io import StringIO

    err = StringIO()
    with redirect_stderr(err):
        code = cli.main(["report", *args])
    return code, err.getvalue()


@pytest.mark.parametrize(("args", "expect"), [
    (("{tmp}/missing.sqlite", "-o", "{tmp}/r.html"), "no recording at {tmp}/missing.sqlite"),
    (("{tmp}", "-o", "{tmp}/r.html"), "{tmp} is not a file"),
    (("{tmp}/text.sqlite", "-o", "{tmp}/r.html"),
     "cannot read {tmp}/text.sqlite: file is not a database"),
    (("{tmp}/other.sqlite", "-o", "{tmp}/r.html"), "{tmp}/other.sqlite is not a gputop "
                                                   "recording"),
    (("{tmp}/empty.sqlite", "-o", "{tmp}/r.html"), "{tmp}/empty.sqlite holds no ticks yet"),
    (("{tmp}/ok.sqlite", "-o", "{tmp}/no/such/dir/r.html"),
     "cannot write the report to {tmp}/no/such/dir/r.html: No such file or directory"),
    (("{tmp}/ok.sqlite", "-o", "{tmp}"), "cannot write the report to {tmp}: it is a directory"),
    (("{tmp}/ok.sqlite",), "the following arguments are required: -o/--output"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                          expect: str) -> None:
    (tmp_path / "text.sqlite").write_text("not a database, just text\n" * 100)
    with sqlite3.connect(tmp_path / "other.sqlite") as db:
        db.execute("CREATE TABLE precious (x)")
    open_record(str(tmp_path / "empty.sqlite")).close()
    writer = RecordWriter(open_record(str(tmp_path / "ok.sqlite")))
    writer.write(frame())
    writer.db.close()
    code, err = _report(*(a.format(tmp=tmp_path) for a in args))
    assert code == 2
    assert err == f"gputop: {expect.format(tmp=tmp_path)}\n" or (
        err.startswith(f"gputop: {expect.format(tmp=tmp_path)}") and err.count("\n") == 1)
    assert not list(tmp_path.glob(".gputop-*"))  # nothing half-written left behind


def test_a_damaged_recording_is_one_line_and_leaves_the_old_report(tmp_path: Path,
                                                                   recording: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("the report from yesterday")
    damaged = tmp_path / "damaged.sqlite"
    data = bytearray(recording.read_bytes())
    data[len(data) // 2:] = b"\xff" * (len(data) - len(data) // 2)
    damaged.write_bytes(bytes(data))
    code, err = _report(str(damaged), "-o", str(out))
    assert code == 2
    assert err.startswith(f"gputop: cannot read {damaged}: ") and err.count("\n") == 1
    assert out.read_text() == "the report from yesterday"


def test_a_report_is_written_whole_and_says_what_it_holds(tmp_path: Path,
                                                          recording: Path) -> None:
    out = tmp_path / "r.html"
    code, err = _report(str(recording), "-o", str(out))
    assert code == 0
    size = out.stat().st_size
    assert err == (f"gputop: wrote {out} ({size / 1e6:.1f} MB: {STEPS // STEPS_PER_TICK} "
                   f"ticks, {STEPS} steps)\n")
    assert out.read_text().rstrip().endswith("</html>")


@pytest.mark.slow  # a fresh interpreter running gputop
def test_report_never_loads_textual(tmp_path: Path, recording: Path) -> None:
    code = ("import sys\nfrom gputop.app.cli import main\n"
            f"assert main(['report', {str(recording)!r}, '-o', {str(tmp_path / 'r.html')!r}]) "
            "== 0\nprint('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    assert "gputop.export.report.page" in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"textual", "rich"}}


def test_write_report_returns_what_it_wrote(tmp_path: Path, recording: Path) -> None:
    written = write_report(str(recording), str(tmp_path / "r.html"))
    assert (written.ticks, written.steps) == (STEPS // STEPS_PER_TICK, STEPS)
    assert written.bytes == (tmp_path / "r.html").stat().st_size
