"""htop's keys in a real terminal (tmux): F10 quits, F5 the tree, F6 the sort chooser, M P T
sort, kernel threads hidden until K, a process's threads shown by H, F1 help laid out for
80x24."""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gputop.tui.widgets.help import HELP
from tests.helpers import tmux
from tests.helpers.threaded import named_threads, thread_names

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
COMMAND = f"{shlex.quote(tmux.PYTHON)} -m gputop --demo idle --membw off"


@pytest.fixture
def screen_80x24() -> Iterator[str]:
    """gputop --demo idle in an 80x24 terminal, its first frame drawn."""
    with tmux.session(REPO, 80, 24) as name:
        tmux.spawn(name, COMMAND)
        tmux.wait_for(name, lambda s: "COMMAND" in s and "F10" in s, timeout_s=120)
        yield name


def _keys(name: str, *keys: str) -> None:
    tmux.tmux("send-keys", "-t", name, *keys)


def _title_row(text: str) -> str:
    return next(line for line in text.splitlines() if "PID" in line and "COMMAND" in line)


def test_the_footer_names_the_f_keys_in_htops_order(screen_80x24: str) -> None:
    footer = tmux.screen(screen_80x24).rstrip("\n").splitlines()[-1]
    names = re.findall(r"F(\d+)", footer)
    assert names[:6] == ["1", "3", "5", "6", "9", "10"], footer


def test_f10_quits(screen_80x24: str) -> None:
    _keys(screen_80x24, "F10")
    assert tmux.exit_code(screen_80x24) == 0


def test_f5_and_t_toggle_the_tree(screen_80x24: str) -> None:
    _keys(screen_80x24, "F5")
    tmux.wait_for(screen_80x24, lambda s: "tree" in _title_row(s))
    _keys(screen_80x24, "t")
    tmux.wait_for(screen_80x24, lambda s: "tree" not in _title_row(s))


def test_f6_chooses_the_sort_column_from_a_list(screen_80x24: str) -> None:
    _keys(screen_80x24, "F6")
    text = tmux.wait_for(screen_80x24, lambda s: "Sort by" in s)
    assert all(title in text for title in ("%CPU", "RSS", "GPU MEM", "PID", "TIME"))
    _keys(screen_80x24, "End", "Enter")  # TIME, the last
    text = tmux.wait_for(screen_80x24, lambda s: "Sort by" not in s and "TIME▼" in s)
    assert "sort: TIME▼" in _title_row(text)


@pytest.mark.parametrize(("key", "title"), [("M", "RSS"), ("T", "TIME"), ("P", "%CPU")])
def test_htops_sort_letters(screen_80x24: str, key: str, title: str) -> None:
    if key == "P":  # %CPU is the default: sort by another column first
        _keys(screen_80x24, "M")
        tmux.wait_for(screen_80x24, lambda s: "RSS▼" in _title_row(s))
    _keys(screen_80x24, key)
    tmux.wait_for(screen_80x24, lambda s: f"{title}▼" in _title_row(s))


def test_kernel_threads_are_hidden_until_k(screen_80x24: str) -> None:
    text = tmux.wait_for(screen_80x24, lambda s: "kernel threads hidden (K)" in s)
    hidden = int(re.search(r"(\d+) kernel threads hidden", text).group(1))  # type: ignore[union-attr]
    assert hidden > 0
    _keys(screen_80x24, "/", "kthreadd", "Enter")
    text = tmux.wait_for(screen_80x24, lambda s: "filter: kthreadd" in s)
    assert not [line for line in text.splitlines() if line.rstrip().endswith("kthreadd")]
    _keys(screen_80x24, "K")
    tmux.wait_for(screen_80x24, lambda s: any(
        line.rstrip().endswith("[kthreadd]") for line in s.splitlines()))


def _thread_lines(text: str, threads: dict[int, str]) -> dict[int, str]:
    """The lines that show one of `threads`: its TID first, its name last."""
    return {tid: line for line in text.splitlines() for tid, name in threads.items()
            if line.split()[:1] == [str(tid)] and line.rstrip().endswith(name)}


def test_h_shows_a_process_threads_beneath_it_and_hides_them_again(screen_80x24: str) -> None:
    with named_threads(("hkey-one", "hkey-two", "hkey-three"), marker="hmark7") as proc:
        threads = thread_names(proc.pid)
        _keys(screen_80x24, "/", "hmark7", "Enter")
        tmux.wait_for(screen_80x24, lambda s: "filter: hmark7" in s and any(
            line.split()[:1] == [str(proc.pid)] for line in s.splitlines()))
        _keys(screen_80x24, "H")
        text = tmux.wait_for(screen_80x24,
                             lambda s: len(_thread_lines(s, threads)) == len(threads))
        lines = text.splitlines()
        owner = next(at for at, line in enumerate(lines) if line.split()[:1] == [str(proc.pid)])
        assert {line for line in lines[owner + 1:owner + 1 + len(threads)]} == set(
            _thread_lines(text, threads).values())  # right beneath their process
        _keys(screen_80x24, "H")
        tmux.wait_for(screen_80x24, lambda s: not _thread_lines(s, threads) and any(
            line.split()[:1] == [str(proc.pid)] for line in s.splitlines()))


SCROLLBAR = re.compile(r"[▁▂▃▄▅▆▇█▔▕▏]+\s*$")  # the box's scrollbar, drawn inside it


def _help_lines() -> set[str]:
    """The help's lines as the screen shows them: markup gone, spaces trimmed."""
    plain = re.sub(r"\[/?(b|dim)\]", "", HELP)
    return {line.strip() for line in plain.splitlines()}


def _scrolled_from(before: str) -> Callable[[str], bool]:
    """Whether a screen is the help box again, scrolled on from `before`."""
    return lambda s: s != before and s.count("│") >= 2


def test_the_help_fits_80x24_without_wrapped_fragments(screen_80x24: str) -> None:
    _keys(screen_80x24, "F1")
    expected = _help_lines()
    seen: set[str] = set()
    text = tmux.wait_for(screen_80x24, lambda s: "gputop keys" in s)
    for _ in range(12):  # a screenful, then scrolled on until the last line shows
        inside = [SCROLLBAR.sub("", line.split("│")[1]).strip() for line in text.splitlines()
                  if line.count("│") >= 2]
        assert inside, text
        for line in inside:
            assert line in expected, f"a wrapped fragment: {line!r}\n{text}"
        seen.update(inside)
        if "Esc, q, ? or F1 closes." in seen:
            break
        _keys(screen_80x24, "PageDown")
        text = tmux.wait_for(screen_80x24, _scrolled_from(text))
    assert "Esc, q, ? or F1 closes." in seen
    _keys(screen_80x24, "F1")
    tmux.wait_for(screen_80x24, lambda s: "gputop keys" not in s and "COMMAND" in s)
