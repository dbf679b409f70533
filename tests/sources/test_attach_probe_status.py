"""Issue 13: `--attach` on a probed process says what the probe saw, not "no probe ring;
start it with gputop run" (which is how it was started)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.sources.attach import check_attachable, config_from_meta, probe_status
from tests.helpers.probe import ROOT, trainer_env

WAITS = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"


def test_the_probes_status_is_shown_as_said_and_kept_out_of_the_settings() -> None:
    meta = {ring_format.META_STATUS: "probed; no optimizer step seen yet\x1b[2J", "batch_size": 8}
    status = probe_status(meta)
    assert status is not None and status.startswith("probed; no optimizer step seen yet")
    assert "\x1b" not in status  # the trainer's words are input: escaped
    config = config_from_meta(meta)
    assert config.batch_size == 8 and not config.extra
    assert probe_status({"batch_size": 8}) is None
    assert probe_status({ring_format.META_STATUS: 3}) is None


@pytest.mark.slow
def test_a_probed_process_without_a_ring_yet_is_not_told_to_start_under_the_probe(
    tmp_path: Path,
) -> None:
    """Before its first loader pass or backward (imports, building the model) a probed
    process has no ring: say that, not how to start it under the probe."""
    script, stop = tmp_path / "waits.py", tmp_path / "stop"
    script.write_text(WAITS)
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), str(stop)],
                            env=trainer_env(tmp_path), cwd=ROOT)
    try:
        reason = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            reason = check_attachable(proc.pid, str(tmp_path))
            if reason is not None and "runs under the probe" in reason:
                break
            time.sleep(0.05)  # the interpreter may still be starting (argv not yet ours)
        assert reason is not None and "runs under the probe but has no ring yet" in reason
        assert "start it with" not in reason
    finally:
        stop.touch()
        proc.wait(timeout=30)
    assert proc.returncode == 0
