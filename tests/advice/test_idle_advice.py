"""gpu-idle names a GPU holder that does nothing; gpu-starved never takes it for a wait on
input, and names the processes it could be, never a placeholder."""

from __future__ import annotations

from dataclasses import replace

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.analysis.idle_holders import IdleClock
from gputop.core.model import Advice, Frame, ProcessSample, TrainerGroup
from tests.helpers.builders import GIB, attached, frame, gpu, process

KERNEL = ("/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/run/user/1000/kernel-1.json")
QUIET: dict[int, tuple[float, ...]] = {3: (0.0,) * 30}
LOADER_WORDS = ("num_workers", "pin_memory", "DataLoader")


def holder(pid: int = 4121, state: str = "S", cpu: float = 0.0, idle_s: float | None = 2520.0,
           cmdline: tuple[str, ...] = KERNEL) -> ProcessSample:
    """A process row holding GPU 3, idle `idle_s` (as derive sets it)."""
    return replace(process(pid, cpu=cpu), state=state, cmdline=cmdline, username="ana",
                   cpu_idle_s=idle_s, gpu_indices=(3,), gpu_memory_bytes=int(78 * GIB))


def idle_frame(row: ProcessSample, util: float = 0.0) -> Frame:
    return frame(gpus=(gpu(3, util=util, used_gib=78.5, pids=((row.pid, 78.0),)),),
                 processes=[row])


def advice(f: Frame, history: dict[int, tuple[float, ...]] | None = None) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, QUIET if history is None else history))}


def no_loader_words(found: dict[str, Advice]) -> None:
    for a in found.values():
        assert not any(w in a.action for w in LOADER_WORDS), a


def test_an_idle_jupyter_kernel_is_named_with_what_freeing_it_gives() -> None:
    found = advice(idle_frame(holder()))
    a = found["gpu-idle"]
    assert a.title == "GPU 3 is held by an idle process" and a.severity == "warn"
    assert a.evidence.startswith(
        "GPU 3 holds 78.0 GiB for PID 4121 (ana, ipykernel_launcher): a Jupyter kernel, "
        "sleeping, no CPU for 42 min; GPU util at most 0% over 30 samples")
    assert "Shut down or restart the Jupyter kernel (or `kill 4121`)" in a.action
    assert "frees 78.0 GiB, the whole GPU 3" in a.action
    assert "gpu-starved" not in found
    no_loader_words(found)


def test_a_stopped_job_is_told_to_continue_or_end() -> None:
    a = advice(idle_frame(holder(state="T", cmdline=("python", "train.py"))))["gpu-idle"]
    assert "train.py): a stopped job, stopped (T)" in a.evidence
    assert "`kill -CONT 4121` to resume it, or end it (`kill 4121`)" in a.action


def test_a_process_blocked_in_the_kernel_says_where_to_look() -> None:
    a = advice(idle_frame(holder(state="D", cmdline=("python", "train.py"))))["gpu-idle"]
    assert "a process blocked in the kernel" in a.evidence
    assert "/proc/4121/wchan" in a.action


def test_a_holder_that_uses_cpu_is_not_idle_and_is_named_for_attaching() -> None:
    busy = holder(cpu=95.0, idle_s=0.0, cmdline=("python", "train.py"))
    found = advice(idle_frame(busy))
    assert "gpu-idle" not in found
    action = found["gpu-starved"].action
    assert "gputop --attach 4121" in action and "--attach PID" not in action


def test_a_holder_whose_workers_use_cpu_is_not_idle() -> None:
    clock = IdleClock()
    row = holder(cpu=0.0, idle_s=None)
    group = TrainerGroup(pid=row.pid, worker_pids=(5000,), workers_cpu_percent=80.0,
                         num_threads_total=8, pin_memory_thread=False)
    assert clock.idle_s([row], {row.pid: group}, now=10.0) == {row.pid: 0.0}
    assert clock.idle_s([row], {}, now=11.0) == {row.pid: 1.0}  # idle since the busy tick


def test_idle_time_counts_from_the_first_idle_interval_and_restarts_on_use() -> None:
    clock = IdleClock()
    row = holder(idle_s=None)
    assert clock.idle_s([replace(row, cpu_percent=None)], {}, now=100.0) == {}  # no rate yet
    assert clock.idle_s([row], {}, now=101.0) == {row.pid: 1.0}
    assert clock.idle_s([row], {}, now=103.5) == {row.pid: 3.5}
    assert clock.idle_s([replace(row, cpu_percent=40.0)], {}, now=104.0) == {row.pid: 0.0}
    assert clock.idle_s([row], {}, now=105.0) == {row.pid: 1.0}
    reborn = replace(row, start_ticks=row.start_ticks + 1)  # the PID went to a new process
    assert clock.idle_s([reborn], {}, now=106.0) == {row.pid: 1.0}


def test_a_stepping_trainer_at_zero_util_is_not_idle() -> None:
    row = holder(cmdline=("python", "train.py"))
    f = replace(idle_frame(row), attached=frame(attach=(attached(row.pid, 90, 10),)).attached)
    assert "gpu-idle" not in advice(f)


def test_a_busy_gpu_has_no_idle_holder() -> None:
    assert "gpu-idle" not in advice(idle_frame(holder(), util=97.0), {3: (97.0,) * 30})
    assert "gpu-idle" not in advice(idle_frame(holder()), {3: (0.0,) * 29 + (60.0,)})


def test_a_quiet_gpu_with_no_visible_process_says_so_instead_of_a_placeholder() -> None:
    f = frame(gpus=(gpu(3, util=0, used_gib=78),))
    a = advice(f)["gpu-starved"]
    assert "No process on this GPU is visible to gputop" in a.action
    assert "PID" not in a.action
    hidden = frame(gpus=(gpu(3, util=0, used_gib=78, pids=((77, 78.0),)),))
    assert "(PID 77 is in another PID namespace)" in advice(hidden)["gpu-starved"].action


def test_gpu_starved_names_every_candidate() -> None:
    rows = [process(11, cpu=50.0), process(12, cpu=50.0)]
    f = frame(gpus=(gpu(3, util=0, used_gib=78, pids=((11, 39.0), (12, 39.0))),),
              processes=rows)
    action = advice(f)["gpu-starved"].action
    assert "Time the steps of PIDs 11, 12 (gputop --attach 11 or gputop --attach 12" in action


def test_a_stalled_attached_trainer_says_when_it_last_stepped() -> None:
    row = holder(cmdline=("python", "train.py"))
    state = replace(frame(attach=(attached(row.pid, 90, 10),)).attached[0], state="stalled",
                    idle_s=300.0)
    a = advice(replace(idle_frame(row), attached=(state,)))["gpu-idle"]
    assert "a trainer that stopped stepping" in a.evidence and "last step 5 min ago" in a.evidence
    assert f"py-spy dump --pid {row.pid}" in a.action


def test_a_short_pause_is_info_and_a_stopped_job_a_warning_at_once() -> None:
    brief = holder(idle_s=3.0, cmdline=("python", "train.py"))
    assert advice(idle_frame(brief))["gpu-idle"].severity == "info"
    stopped = replace(brief, state="T")
    assert advice(idle_frame(stopped))["gpu-idle"].severity == "warn"
