"""Real recordings (written by the recorder's own RecordWriter) for the tests that treat a
recording as hostile input, and every reader of one run over a file in this process."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from gputop.core.model import (
    Advice,
    Frame,
    MemoryBandwidthSample,
    MemoryConsumer,
    MemoryLayoutCheck,
    SourceError,
    TrainerConfig,
)
from gputop.export.chrome_trace import ExportError, chrome_trace
from gputop.export.report.data import report_data
from gputop.export.report.page import render_page
from gputop.export.text import render
from gputop.frames.playback import derived
from gputop.recording.reader import Recording, UnreadableRecording
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordError, RecordWriter, open_record
from tests.helpers.tui import frames

PWN = "\x1b]0;PWN\x07\x1b[2J"  # OSC 0 sets the pane's title, CSI 2 J clears the screen
SHOWN = "\\x1b]0;PWN\\x07\\x1b[2J"  # what printable() makes of it


def recorded_frames(prefix: str = "") -> list[Frame]:
    """Three data-starved ticks with a trainer's steps, advice, an error, memory bandwidth
    with its consumers and layout check; every free-text string starts with `prefix`."""
    out = []
    for tick, frame in enumerate(frames("data-starved", 3, attach=True, advice=True)):
        out.append(_with_texts(frame, prefix, tick))
    return out


def write_recording(path: Path, prefix: str = "") -> Path:
    """`recorded_frames(prefix)` recorded to `path` by the recorder's writer."""
    writer = RecordWriter(open_record(str(path)))
    try:
        for frame in recorded_frames(prefix):
            writer.write(frame)
    finally:
        writer.db.close()
    return path


def _with_texts(frame: Frame, p: str, tick: int) -> Frame:
    host = replace(frame.host, hostname=p + frame.host.hostname)
    gpus = tuple(replace(g, name=p + g.name, uuid=p + g.uuid) for g in frame.gpu.gpus)
    gpu = replace(frame.gpu, gpus=gpus, note=p + "note", driver_version=p + "550",
                  scenario=p + "data-starved")
    processes = tuple(replace(q, name=p + q.name, username=p + "alice",
                              cmdline=tuple(p + word for word in q.cmdline) or (p + "x",))
                      for q in frame.processes)
    config = TrainerConfig(num_workers=2, device=p + "cuda:0", rank=0, world_size=1,
                           extra=((p + "key", p + "value"),))
    attached = tuple(replace(a, config=config, error=p + "ring gone") for a in frame.attached)
    check = MemoryLayoutCheck(verdict=p + "unbalanced", source=p + "dmidecode",
                              findings=(p + "one DIMM",), fill_slots=(p + "A2",),
                              slow_slots=(p + "B1",), usual_module=p + "DDR5", reason=p + "why")
    pid = frame.processes[0].pid if frame.processes else 1
    membw = MemoryBandwidthSample(
        p + "estimate", p + "low", pressure=0.3, note=p + "note", layout=p + "2x DDR5",
        relative_to=p + "peak", top_consumers=(MemoryConsumer(pid, p + "hog", 1e9),),
        layout_check=check)
    advice = (Advice(p + "starved", "warn", p + "GPUs wait", p + "idle 60%", p + "add workers"),)
    errors = (SourceError("membw", p + "OSError: gone", 1, 2.0, frame.time),) if tick else ()
    return replace(frame, host=host, gpu=gpu, processes=processes, attached=attached,
                   memory_bandwidth=membw, advice=advice, errors=errors)


def read_everything(path: Path) -> list[str]:
    """Replay every tick, make the report and the Chrome trace, and open the file to append
    to; what each said: "works", or its one-line refusal. Any other exception propagates."""
    return [_replay(path), _report(path), _trace(path), _append(path)]


def _replay(path: Path) -> str:
    try:
        replay = Replay(str(path))
        try:
            for index in range(len(replay)):
                frame = derived(replay.frame(index))
                render(frame)
                assert_printable(frame)
                replay.trend(index, 5)
        finally:
            replay.close()
    except UnreadableRecording as exc:
        return one_line(exc)
    return "works"


def _report(path: Path) -> str:
    try:
        with Recording(str(path)) as recording:
            data = report_data(recording)
    except UnreadableRecording as exc:
        return one_line(exc)
    page = render_page(data)
    payload = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert_printable(json.loads(payload))
    return "works"


def _trace(path: Path) -> str:
    try:
        trace = chrome_trace(str(path))
    except ExportError as exc:
        return one_line(exc)
    assert_printable(json.loads(json.dumps(trace)))
    return "works"


def _append(path: Path) -> str:
    try:
        db = open_record(str(path))
    except RecordError as exc:
        return one_line(exc)
    try:
        RecordWriter(db)
    except RecordError as exc:
        return one_line(exc)
    finally:
        db.close()
    return "works"


def one_line(exc: Exception) -> str:
    """The refusal, checked to be one printable line."""
    text = str(exc)
    assert text and "\n" not in text, repr(text)
    assert not steering(text), repr(text)
    return text


def steering(text: str) -> set[str]:
    """The characters in `text` a terminal would act on (C0, DEL, C1)."""
    return {ch for ch in text if unicodedata.category(ch) == "Cc"}


def strings_in(value: Any) -> list[str]:
    """Every string in a model object or a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if is_dataclass(value) and not isinstance(value, type):
        return [s for f in fields(value) for s in strings_in(getattr(value, f.name))]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings_in(v)]
    return []


def assert_printable(value: Any) -> None:
    """No string in `value` holds a character that steers a terminal."""
    bad = [s for s in strings_in(value) if steering(s)]
    assert not bad, bad[:3]
