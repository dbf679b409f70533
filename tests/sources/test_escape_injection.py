"""Issue 12, finding 3: strings from other people (argv, comm, annotate(), NVML, hostname)
reach every output escaped, so none of them can steer the terminal."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from textual.geometry import Region

from gputop.core.model import GpuReport, ProcessSample
from gputop.sources.attach import RingAttachSource
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from gputop.tui import build_app
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.cli import gputop
from tests.helpers.nvml import open_source
from tests.helpers.probe import ROOT, trainer_env
from tests.helpers.tui import FedSampler, frames, sync

TITLE = "\x1b]2;PWNED\x07"  # OSC 2: would set the terminal's window title
ARGV0 = f"{TITLE}\x1b[2J\u202eevil"
MARKUP = "[link=https://example.invalid][@click=app.quit]click[/][/link]"
COMM = "\x1b[31m[b]red"  # 11 bytes: fits the kernel's 15-byte comm
BIDI = "\u061c\u200e\u200f\u2028\u2029" + "".join(map(chr, [*range(0x202A, 0x202F),
                                                             *range(0x2066, 0x206A)]))

HOLD_COMM = f"""
import sys
with open('/proc/self/comm', 'w') as f:
    f.write({COMM!r})
print('up', flush=True)
sys.stdin.readline()
"""


def steering(text: str) -> set[str]:
    """The characters in `text` that a terminal would act on or reorder around."""
    return {ch for ch in text if unicodedata.category(ch) in ("Cc", "Cs") or ch in BIDI}


def _wait_for_cmdline(pid: int, prefix: bytes) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(prefix):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"PID {pid} never exec'd its crafted argv[0]")


@pytest.fixture
def hostile() -> Iterator[tuple[int, int]]:
    """(pid of a busy `yes` with a crafted argv, pid of a python that renamed its comm)."""
    yes = shutil.which("yes")
    assert yes is not None
    argv = subprocess.Popen(
        [ARGV0, MARKUP], executable=yes, stdout=subprocess.DEVNULL  # exec -a, from Python
    )
    comm = subprocess.Popen([sys.executable, "-c", HOLD_COMM], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_cmdline(argv.pid, ARGV0.encode())
        assert comm.stdout is not None and comm.stdout.readline().strip() == "up"
        yield argv.pid, comm.pid
    finally:
        for proc in (argv, comm):
            proc.kill()
            proc.wait(timeout=10)


def _sample_rows(pids: tuple[int, ...]) -> dict[int, ProcessSample]:
    source = ProcProcessSource()
    try:
        processes = source.sample(GpuReport("none")).rows
    finally:
        source.close()
    return {p.pid: p for p in processes if p.pid in pids}


@pytest.mark.slow
def test_a_crafted_argv_and_comm_enter_the_process_model_escaped(
    hostile: tuple[int, int],
) -> None:
    argv_pid, comm_pid = hostile
    rows = _sample_rows(hostile)
    for row in rows.values():
        assert not steering(row.name + " ".join(row.cmdline) + (row.username or "")), row
    assert rows[argv_pid].cmdline == ("\\x1b]2;PWNED\\x07\\x1b[2J\\u202eevil", MARKUP)
    assert rows[comm_pid].name == "\\x1b[31m[b]red"


@pytest.mark.slow
def test_once_text_and_json_show_a_crafted_argv_escaped(hostile: tuple[int, int]) -> None:
    argv_pid, comm_pid = hostile
    text = gputop("--once", "--membw", "off", "--interval", "0.5")
    assert text.returncode == 0, text.stderr
    assert not steering(text.stdout.replace("\n", ""))
    assert "\\x1b]2;PWNED\\x07" in text.stdout  # the busy `yes` is among the top by %CPU
    out = gputop("--once", "--membw", "off", "--interval", "0.5", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {p["pid"]: p for p in doc["processes"] if p["pid"] in hostile}
    assert rows.keys() == {argv_pid, comm_pid}
    assert not steering(json.dumps(doc, ensure_ascii=False).replace("\n", ""))
    assert rows[argv_pid]["cmdline"][0].startswith("\\x1b]2;PWNED\\x07")


HOSTILE_FACTS = {TITLE + "key": "value\x1b[2J\u202e" + TITLE, "device": "cuda\x07", "ok": "tea"}
HOSTILE_TRAINER = f"""
import sys
import gputop.probe as p
p.annotate(**{HOSTILE_FACTS!r})
print('up', flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow
def test_hostile_annotate_strings_enter_the_trainer_config_escaped(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOSTILE_TRAINER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=trainer_env(tmp_path),
                            cwd=ROOT)
    source = RingAttachSource(directory=str(tmp_path))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        source.attach(proc.pid)
        (state,) = source.sample()
    finally:
        source.close()
        proc.kill()
        proc.wait(timeout=10)
    config = state.config
    assert ("ok", "tea") in config.extra
    assert not steering("".join(key + value for key, value in config.extra))
    assert ("\\x1b]2;PWNED\\x07key", "value\\x1b[2J\\u202e\\x1b]2;PWNED\\x07") in config.extra
    assert config.device == "cuda\\x07"


def test_nvml_names_uuid_and_driver_version_enter_escaped(nv: ModuleType) -> None:
    nv.fake_driver.devices = [nv.FakeDevice(name=f"{TITLE}H100", uuid="GPU-\u202e1")]
    nv.fake_driver.driver_version = "580\x1b[2J"
    report = open_source(nv).sample()
    (gpu,) = report.gpus
    assert (gpu.name, gpu.uuid) == ("\\x1b]2;PWNED\\x07H100", "GPU-\\u202e1")
    assert report.driver_version == "580\\x1b[2J"


def test_the_hostname_enters_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: f"box{TITLE}")
    assert ProcHostSource().sample().hostname == "box\\x1b]2;PWNED\\x07"


@pytest.mark.slow
@sync
async def test_the_tui_paints_crafted_names_as_plain_text(hostile: tuple[int, int]) -> None:
    rows = _sample_rows(hostile)
    frame = frames("idle", 1)[0]
    hot = tuple(replace(row, cpu_percent=99.0) for row in rows.values())  # sorted to the top
    app = build_app(FedSampler())
    async with app.run_test(size=(160, 40)) as pilot:
        app.show_frame(replace(frame, processes=hot + frame.processes))
        await pilot.pause()
        painted = "\n".join(
            strip.text
            for pane in app.query(LinePane)
            for strip in pane.render_lines(Region(0, 0, pane.size.width, pane.size.height))
        )
    assert not steering(painted.replace("\n", ""))
    assert "\\x1b]2;PWNED\\x07" in painted
    assert MARKUP[:40] in painted  # markup in a name is shown, not interpreted


class _RefusingSampler(FedSampler):
    """A sampler whose attach fails with a message that quotes a name from outside."""

    def attach(self, pid: int) -> None:
        raise ValueError(f"cannot read ring {MARKUP}[/bold]")


@sync
async def test_an_attach_error_quoting_markup_is_shown_as_plain_text() -> None:
    app = build_app(_RefusingSampler())
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_frame(frames("data-starved", 1)[0])
        await pilot.pause()
        await pilot.press("enter")  # the cursor is on 4242, which runs the probe
        await pilot.pause()
        (note,) = app._notifications
        assert note.message == f"cannot attach to 4242: cannot read ring {MARKUP}[/bold]"
        assert not note.markup
