"""Real torch CPU trainers under the probe, as subprocesses, judged by what the ring says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.app.children import probe_env, start_under_probe
from tests.helpers.probe import ROOT, TRAINERS, run_probed, trainer_env, watch_process

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


@pytest.mark.alone  # a verdict and a share of step time: load moves them
def test_a_data_bound_trainer_is_data_bound_with_the_share_it_measured(tmp_path: Path) -> None:
    own = tmp_path / "own.json"
    code, state = run_probed("data_bound.py", str(own), ring_dir=tmp_path)
    assert code == 0 and state.dropped_records == 0
    counted = [s for s in state.steps if not s.warmup]
    assert len(counted) >= 40
    data_bound = sum(s.verdict == "data-bound" for s in counted)
    assert data_bound >= 0.9 * len(counted)
    measured = json.loads(own.read_text())["input_percent"]
    assert state.summary.input_bound_percent is not None
    assert abs(state.summary.input_bound_percent - measured) <= 10.0
    assert state.summary.verdict == "data-bound" and state.summary.band == "highly"
    assert any(s.warmup for s in state.steps)  # shown, not hidden
    assert state.config.num_workers == 0 and state.config.batch_size == 4


@pytest.mark.alone  # a verdict from step times: load moves it
def test_a_compute_bound_trainer_is_compute_bound(tmp_path: Path) -> None:
    code, state = run_probed("compute_bound.py", ring_dir=tmp_path)
    assert code == 0
    assert state.summary.verdict == "compute-bound", state.summary
    assert state.summary.steps >= 20
    assert state.config.num_workers == 1 and state.config.prefetch_factor == 4
    assert state.config.persistent_workers is True


def test_an_unmodified_script_yields_steps_and_its_loaders_settings(tmp_path: Path) -> None:
    code, state = run_probed("with_eval.py", ring_dir=tmp_path)
    assert code == 0
    cfg = state.config
    assert (cfg.batch_size, cfg.num_workers, cfg.pin_memory) == (8, 0, False)
    assert cfg.device == "cpu" and cfg.num_threads is not None and cfg.num_threads >= 1
    assert len(state.steps) == 16  # two epochs of 8 training batches; evaluation kept apart
    assert {s.batch_size for s in state.steps} == {8}
    assert [s.epoch for s in state.steps] == [0] * 8 + [1] * 8
    assert all(s.data_ns is not None and s.backward_ns is not None for s in state.steps)
    assert all(s.optimizer_ns is not None for s in state.steps)
    # the model is found at the first optimizer step: its forward is timed from then on
    assert state.steps[0].forward_ns is None
    assert all(s.forward_ns is not None for s in state.steps[1:])


@pytest.mark.parametrize("timed", ["forward", "forward,backward,optimizer"])
def test_a_program_timing_its_own_phases_gets_the_torch_patch_only_where_it_needs_it(
    tmp_path: Path, timed: str,
) -> None:
    """Evaluation comes first each epoch: the training loader is the one whose steps hold
    a backward pass, which the patch sees when the program does not time it itself."""
    proc = subprocess.Popen([sys.executable, str(TRAINERS / "manual_phases.py"), timed],
                            env=trainer_env(tmp_path), cwd=ROOT, stdout=subprocess.PIPE)
    state = watch_process(proc, tmp_path)
    assert proc.returncode == 0 and proc.stdout is not None
    patched = timed == "forward"  # else the backward wrapper and the pre-hook stepped aside
    assert proc.stdout.read().decode().split() == [
        "backward", "wrapped:", f"{patched},", "optimizer", "pre-hooks:", str(int(patched))]
    assert len(state.steps) == 16 and {s.batch_size for s in state.steps} == {8}
    assert [s.epoch for s in state.steps] == [0] * 8 + [1] * 8
    assert all(s.forward_ns is not None and s.data_ns is not None for s in state.steps)
    own = timed != "forward"  # backward and optimizer times only from the program's phases
    assert all((s.backward_ns is not None) == own for s in state.steps)
    assert all((s.optimizer_ns is not None) == own for s in state.steps)


def test_without_a_dataloader_steps_come_from_optimizer_steps(tmp_path: Path) -> None:
    """The first step opens at the first backward; from the first optimizer step on, each
    runs to the next and its input is the time before the model's forward (issue 13)."""
    code, state = run_probed("no_loader.py", ring_dir=tmp_path)
    assert code == 0 and len(state.steps) == 12
    # the first step's input is not measured: its host time holds it, never a data verdict
    assert state.steps[0].data_ns is None and state.steps[0].verdict != "data-bound"
    assert state.steps[0].host_ns is not None
    assert all(s.data_ns is not None and s.input_outside_model for s in state.steps[1:])
    assert state.summary.verdict != "unknown" and state.summary.input_outside_model


def test_module_mode_runs_like_python_dash_m(tmp_path: Path) -> None:
    env = trainer_env(tmp_path)
    env["PYTHONPATH"] += ":" + str(TRAINERS)
    out = subprocess.run([sys.executable, "-m", "gputop.probe", "-m", "with_eval", "3"],
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 3


def test_launch_installs_the_probe_and_returns_the_exit_code(tmp_path: Path) -> None:
    env = trainer_env(tmp_path)
    child = start_under_probe([sys.executable, str(TRAINERS / "with_eval.py"), "7"], env=env,
                              forward_sigint=False)
    state = watch_process(child, tmp_path)
    assert child.returncode == 7
    assert len(state.steps) == 16 and state.config.batch_size == 8


def test_probe_env_puts_the_boot_directory_first_once() -> None:
    env = probe_env({"PYTHONPATH": "/a:/b"})
    first, *rest = env["PYTHONPATH"].split(":")
    assert first.endswith("gputop/probe/_boot") and rest == ["/a", "/b"]
    assert probe_env(env)["PYTHONPATH"] == env["PYTHONPATH"]
    assert env["GPUTOP_PROBE"] == "1"
