"""`make gpu-check`'s advice part, dry-run on the CPU (GPU_CHECK_DEVICE=cpu): its runs, the
advice read from gputop's own sampler and the before/after figures must work before the
script reaches a GPU machine (where device time is short). No GPU rule can fire here and
no gain can show: pin-memory-off fires because the trainer says it trains on CUDA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.modules import load_file

pytestmark = pytest.mark.alone

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_check_advice.py"
DRY_RUN_SCALE = 0.02  # 4 timed steps a run instead of 200: the code runs, nothing is measured
# pin-memory-off must be seen in every run before: its runs step long enough that several of
# the sampler's ticks (TICK_S apart) land while the trainer steps, not one at most
FIRES_SCALE = 0.5


@pytest.fixture
def advice_check(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script, its trainer on the CPU saying it trains on cuda:0."""
    pytest.importorskip("torch")
    monkeypatch.setenv("GPU_CHECK_DEVICE", "cpu")
    monkeypatch.setenv("GPU_CHECK_CLAIM_DEVICE", "cuda:0")
    return load_file("gpu_check_advice", SCRIPT)


@pytest.mark.slow
def test_pin_memory_off_fires_before_and_not_after_in_the_dry_run(
        advice_check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(advice_check.TRAINER)
    (pin, *_) = advice_check.plans(FIRES_SCALE)
    assert pin.rule == "pin-memory-off"
    fires, gone, _pays = advice_check.follow(script, pin, tmp_path)
    out = capsys.readouterr().out
    assert fires and gone, out
    assert "host-to-device copy is" in out and "followed pays: x" in out


@pytest.mark.slow
def test_the_waiting_trainer_is_followed_with_the_workers_its_input_advice_names(
        advice_check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(advice_check.TRAINER)
    run = advice_check.run_jobs(script, (("waiting", None),), 18, tmp_path)
    (followed,) = advice_check.suggested_workers(run)
    out = capsys.readouterr().out
    assert followed[0] == "waiting"
    assert "raise-num-workers" in run.advice, out
    assert followed[1] > 1 and "no number named" not in out
    (fed,) = advice_check.run_jobs(script, (followed,), 14, tmp_path).samples_per_s
    assert fed > 0


@pytest.mark.slow
def test_a_pair_of_jobs_runs_at_once(advice_check: ModuleType, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(advice_check.TRAINER)
    run = advice_check.run_jobs(script, (("saturating", None),) * 2, 14, tmp_path)
    assert len(run.samples_per_s) == 2 and all(v > 0 for v in run.samples_per_s)


def test_the_script_never_imports_textual() -> None:
    code = f"import sys; sys.modules['textual'] = None; sys.path.insert(0, {str(SCRIPT.parent)!r})"
    code += "; import gpu_check_advice"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=SCRIPT.parents[1], timeout=60)
    assert done.returncode == 0, done.stderr
