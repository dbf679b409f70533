"""Issue 12, finding 9: text output degrades to ASCII instead of failing, and annotate() never
raises into the trainer whatever it is handed."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.export.text import ascii_text, write_text
from gputop.sources.attach import config_from_meta
from tests.helpers.probe import ROOT, trainer_env, watch_process

ODD_TRAINER = Path(__file__).parent / "odd_annotate.py"


def _gputop(*args: str, env: dict[str, str], timeout: float = 120
            ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          timeout=timeout, env={**env, "GPUTOP_DEBUG": ""}, cwd=ROOT)


def _env(**changes: str | None) -> dict[str, str]:
    env = {**os.environ, **{k: v for k, v in changes.items() if v is not None}}
    for key in [k for k, v in changes.items() if v is None]:
        env.pop(key, None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("locale_env", [
    {"PYTHONIOENCODING": "ascii"},
    # Python 3.7+ turns the C locale into UTF-8 mode unless told not to; with PYTHONUTF8=0
    # stdout really is ASCII, as on an old system or under `env -i`.
    {"PYTHONIOENCODING": None, "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"},
], ids=["PYTHONIOENCODING=ascii", "LANG=C"])
def test_once_text_in_an_ascii_locale_is_ascii_and_complete(locale_env: dict[str, str | None]
                                                            ) -> None:
    out = _gputop("--once", "--membw", "off", "--interval", "0.2", env=_env(**locale_env))
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("ascii")  # raises on any byte above 127
    assert text.startswith("gputop - ") and re.search(r" - sampled over \d+\.\d\d s", text)
    assert "PROCESSES (top" in text and "COMMAND" in text
    assert not out.stderr


def test_ascii_text_has_readable_substitutes() -> None:
    assert ascii_text("gputop — host … a → b 12 µs 55°C") == "gputop - host ... a -> b 12 us 55degC"
    assert ascii_text("███▌··  ▁▄█ │├└─") == "####..  ### ||`-"
    assert ascii_text("Müller naïve") == "Muller naive"
    assert ascii_text("训 x\ud800y") == "? x?y"
    assert ascii_text("plain ascii\n") == "plain ascii\n"


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "utf-8"])
def test_write_text_never_fails_whatever_the_stream_encodes(encoding: str) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding)
    text = "gputop — 12 µs \ud800 ok\n"
    write_text(text, stream)
    stream.flush()
    written = raw.getvalue().decode(encoding)
    assert written.startswith("gputop ") and written.endswith(" ok\n")
    if encoding == "ascii":
        assert written == "gputop - 12 us ? ok\n"


def test_write_text_keeps_text_a_stream_can_encode() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")
    write_text("gputop — 12 µs\n", stream)
    stream.flush()
    assert raw.getvalue().decode() == "gputop — 12 µs\n"


def test_config_from_a_ring_with_lone_surrogates_is_escaped() -> None:
    config = config_from_meta({"device": "cuda\ud800", "k\udcff": "v\ud800", "big": 10**4000})
    assert config.device == "cuda\\ud800"
    assert ("k\\udcff", "v\\ud800") in config.extra
    extra = dict(config.extra)
    assert len(extra["big"]) == 200
    "".join(k + v for k, v in config.extra).encode("utf-8")


@pytest.mark.slow
def test_a_trainer_annotating_odd_values_finishes_and_its_config_is_readable(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen([sys.executable, str(ODD_TRAINER)], env=trainer_env(tmp_path),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    state = watch_process(proc, tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    assert proc.returncode == 0, err
    assert "finished 200 steps" in out
    assert state.steps and state.steps[-1].step == 199
    extra = dict(state.config.extra)
    assert extra["s"] == "\\ud800x"
    assert extra["obj"].startswith("<object object at 0x")
    assert extra["big"] == "<int of 16610 bits>"
    assert extra["ok"] == "tea" and state.config.device == "cpu\\ud800"
    assert extra["raises"] == "<unprintable Unprintable>"
    assert err.count("gputop.probe:") <= 1


@pytest.mark.slow
def test_once_attached_to_a_trainer_with_a_lone_surrogate_prints(tmp_path: Path) -> None:
    hold = ("import sys, gputop.probe as p; p.annotate(device='cuda\\ud800', s='\\udcffx'); "
            "print('up', flush=True); sys.stdin.readline()")
    proc = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=trainer_env(tmp_path), cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        env = trainer_env(tmp_path)
        text = _gputop("--once", "--membw", "off", "--interval", "0.2", "--attach",
                       str(proc.pid), env=env)
        doc = _gputop("--once", "--json", "--membw", "off", "--interval", "0.2", "--attach",
                      str(proc.pid), env=env)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert text.returncode == 0, text.stderr
    assert "device=cuda\\ud800" in text.stdout.decode("utf-8")
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["attach"]["config"]["extra"]["s"] == "\\udcffx"


FAST_STEPS = """
import time
from gputop import probe
for _ in probe.watch(range(200)):
    with probe.phase("forward"):
        pass
time.sleep(1)  # long enough for `gputop run` to find the ring
"""


@pytest.mark.slow
def test_run_summary_in_an_ascii_locale_has_readable_substitutes() -> None:
    out = _gputop("run", "--membw", "off", "--", sys.executable, "-c", FAST_STEPS,
                  env=_env(PYTHONIOENCODING="ascii"))
    assert out.returncode == 0, out.stderr
    err = out.stderr.decode("ascii")
    summary = next(line for line in err.splitlines() if line.startswith("  step time:"))
    # '3 µs' became '3 us', not '3 \\xb5s'
    assert " us over the last " in summary and " p95 " in summary
    assert "\\x" not in err and "\\u" not in err
