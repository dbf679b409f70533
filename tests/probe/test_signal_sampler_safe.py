"""The signal sampler breaks nothing a trainer does between steps: real trainers under
`python -m gputop.probe` sleep, select, read sockets and pipes, run subprocesses, wait on
events and queues, iterate a DataLoader with workers and save a checkpoint while SIGURG
lands on their main thread; and a program that uses SIGURG itself, from the start or later,
gets the thread sampler and never our signals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gputop.core.model import AttachState
from tests.helpers.probe import ROOT, trainer_env, watch_process
from tests.helpers.scheduling import favoured

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ALL_CHECKED = 7  # the busy trainer's exit code once every call returned what it must

TRAINER_HEAD = """
import json, os, sys, time
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(4, 8), torch.randn(4, 1)
rec = __import__("gputop.probe", fromlist=["recorder"]).recorder()


def train_step():
    loss = nn.functional.mse_loss(model(X), Y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def sampler():
    return rec.facts.get("sampler")
"""

BUSY = """
import queue, select, selectors, socket, subprocess, threading
from torch.utils.data import DataLoader, TensorDataset

WAIT = 0.05  # several of the sampler's periods: signals land inside every call
monotonic = time.monotonic


def later(action):
    threading.Timer(WAIT / 2, action).start()


def check(ok, what):
    if not ok:
        print("failed:", what, file=sys.stderr, flush=True)
        sys.exit(1)


def host_work(step, path):
    t0 = monotonic()
    time.sleep(WAIT)
    check(monotonic() - t0 >= WAIT, "sleep returned early")

    r, w = os.pipe()
    t0 = monotonic()
    check(select.select([r], [], [], WAIT) == ([], [], []), "select saw a silent pipe ready")
    check(monotonic() - t0 >= WAIT, "select returned early")
    later(lambda: os.write(w, b"fed by a thread"))
    check(os.read(r, 100) == b"fed by a thread", "os.read")
    with selectors.DefaultSelector() as sel:
        sel.register(r, selectors.EVENT_READ)
        t0 = monotonic()
        check(sel.select(WAIT) == [], "a selector saw a silent pipe ready")
        check(monotonic() - t0 >= WAIT, "a selector returned early")
        later(lambda: os.write(w, b"x"))
        check(len(sel.select(10 * WAIT)) == 1 and os.read(r, 1) == b"x", "a selector's read")
    os.close(r)
    os.close(w)

    a, b = socket.socketpair()
    with a, b:
        a.settimeout(WAIT)
        try:
            a.recv(10)
            check(False, "recv on a silent socket returned")
        except socket.timeout:
            pass
        a.settimeout(10 * WAIT)
        later(lambda: b.sendall(b"pong"))
        check(a.recv(10) == b"pong", "recv with a timeout")

    done = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.05); print(6 * 7)"],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 0 and done.stdout.strip() == "42", f"subprocess.run {done}")

    event = threading.Event()
    t0 = monotonic()
    check(not event.wait(WAIT) and monotonic() - t0 >= WAIT, "Event.wait timed out early")
    later(event.set)
    check(event.wait(10 * WAIT), "Event.wait missed a set")

    q = queue.Queue()
    try:
        q.get(timeout=WAIT)
        check(False, "an empty queue gave an item")
    except queue.Empty:
        pass
    later(lambda: q.put(step))
    check(q.get(timeout=10 * WAIT) == step, "Queue.get")

    torch.save({"step": step, "w": model[0].weight.detach()}, path)
    back = torch.load(path)
    check(back["step"] == step and torch.equal(back["w"], model[0].weight), "torch.load")


data = TensorDataset(torch.arange(64, dtype=torch.float32))
loader = DataLoader(data, batch_size=8, num_workers=2)
for step in range(8):
    train_step()
    host_work(step, os.environ["CHECKPOINT"])
    if step % 4 == 0:
        total = sum(float(batch[0].sum()) for batch in loader)
        check(total == sum(range(64)), f"DataLoader with workers gave {total}")
train_step()
print(json.dumps({"sampler": sampler()}), flush=True)
sys.exit(ALL_CHECKED)
""".replace("ALL_CHECKED", str(ALL_CHECKED))

OWN_HANDLER_FIRST = """
calls = 0


def own(signum, frame):
    global calls
    calls += 1


signal.signal(signal.SIGURG, own)
""" + TRAINER_HEAD + """
for step in range(40):
    train_step()
    time.sleep(0.01)
print(json.dumps({"sampler": sampler(), "calls": calls}), flush=True)
"""

OWN_HANDLER_LATER = TRAINER_HEAD + """
import signal

calls = 0


def own(signum, frame):
    global calls
    calls += 1


for step in range(20):
    train_step()
    time.sleep(0.01)
first = sampler()
signal.signal(signal.SIGURG, own)
deadline = time.monotonic() + 60
while sampler() != "thread" and time.monotonic() < deadline:
    train_step()
    time.sleep(0.01)
handed_over, calls_before = sampler(), calls
calls = 0
for step in range(50):  # half a second and more: 50 calls a second would show
    train_step()
    time.sleep(0.01)
print(json.dumps({"first": first, "then": handed_over, "calls_before": calls_before,
                  "calls_after": calls}), flush=True)
"""


def run_trainer(tmp_path: Path, source: str) -> tuple[int, dict[str, object], AttachState]:
    """`source` under `python -m gputop.probe`: exit code, its last stdout line as JSON, and
    the final state."""
    script = tmp_path / "busy_trainer.py"
    script.write_text("import signal\n" + textwrap.dedent(source))
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script)],
                            env=trainer_env(tmp_path, CHECKPOINT=str(tmp_path / "ckpt.pt")),
                            cwd=ROOT, start_new_session=True, preexec_fn=favoured(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    state = watch_process(proc, tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode(errors="replace")
    lines = out.strip().splitlines()
    assert lines, err
    return proc.returncode, json.loads(lines[-1]), state


def samples(state: AttachState) -> int:
    return sum(s.samples for s in state.steps)


def test_what_a_trainer_does_between_steps_survives_the_signal_sampler(tmp_path: Path) -> None:
    code, said, state = run_trainer(tmp_path, TRAINER_HEAD + BUSY)
    assert code == ALL_CHECKED
    assert said["sampler"] == "signal"
    assert samples(state) > 0


def test_a_program_with_its_own_sigurg_handler_gets_the_thread_sampler(tmp_path: Path) -> None:
    code, said, state = run_trainer(tmp_path, OWN_HANDLER_FIRST)
    assert code == 0
    assert said == {"sampler": "thread", "calls": 0}
    assert samples(state) > 0


def test_a_handler_put_on_sigurg_later_is_not_called_by_the_sampler(tmp_path: Path) -> None:
    code, said, state = run_trainer(tmp_path, OWN_HANDLER_LATER)
    assert code == 0
    assert said["first"] == "signal" and said["then"] == "thread"
    assert said["calls_after"] == 0
    assert samples(state) > 0
