"""`make gpu-check`'s probe part, dry-run on the CPU: its trainer, the probe and the attach
source must meet before the script ever reaches a GPU machine (where device time is short)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.modules import load_file

pytestmark = pytest.mark.alone

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_check_probe.py"


@pytest.mark.slow
def test_the_starved_trainer_is_data_bound_on_the_cpu_without_invented_gpu_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("GPU_CHECK_DEVICE", "cpu")
    check = load_file("gpu_check_probe", SCRIPT)
    script = tmp_path / "trainer.py"
    script.write_text(check.TRAINER)
    own, state = check.run(script, "starved", 30, tmp_path, probed=True)
    assert own["loop_s"] > 0
    assert state is not None and state.error is None
    assert state.config.device == "cpu" and state.config.num_workers == 2
    steps = [s for s in state.steps if not s.warmup]
    assert len(steps) >= 20, f"{len(steps)} steps measured"
    assert state.summary.verdict == "data-bound", state.summary
    assert all(s.gpu_ns is None and s.gpu_gap_ns is None for s in steps)  # no CUDA here


def test_the_script_never_imports_textual() -> None:
    code = f"import sys; sys.modules['textual'] = None; sys.path.insert(0, {str(SCRIPT.parent)!r})"
    code += "; import gpu_check_probe"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=SCRIPT.parents[1])
    assert done.returncode == 0, done.stderr
