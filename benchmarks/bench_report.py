"""`make bench`: `gputop report` on a 100 000-step recording: how long the report takes to
write, how big it is, and how long headless Chromium takes to show it.

The recording is synthetic but written by the recorder's own RecordWriter (one trainer,
10 steps a tick, two GPUs; tests/helpers/synthetic_recording.py). Render times are the
page's own performance.now() marks: "painted" when its charts are built and the next frame
ran, "charts" the part of that after its data was decoded. Each page is loaded LOADS times,
each in a fresh browser, in turn with the reference: an empty page timed the same way.
Skipped (exit 0, one line) where Chromium is not installed.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.export.report.page import write_report
from tests.helpers.chromium import CHROMIUM, Chromium, ChromiumError
from tests.helpers.synthetic_recording import write_synthetic_recording

STEPS = int(os.environ.get("BENCH_REPORT_STEPS", "100000"))
LOADS = int(os.environ.get("BENCH_REPORT_LOADS", "5"))
GIVE_UP_S = 60.0  # a page not painted by then is reported as such
PAINTED = ("requestAnimationFrame(() => setTimeout(() => { window.painted = "
           "performance.now(); }, 0));")
EMPTY = (f"<!DOCTYPE html><html><body><script>{PAINTED}</script></body></html>",
         "window.painted ? [window.painted, 0] : null")
REPORT_PAINTED = ("(r => r && r.paintedMs ? [r.paintedMs, r.paintedMs - r.decodedMs] : null)"
                  "(window.gputopReport)")

Page = tuple[str, Path, str]  # name, file, expression: [painted ms, charts ms] or null
Times = dict[str, list[list[float] | None]]


def painted_ms(chromium: Chromium, path: Path, expression: str) -> list[float] | None:
    """[ms until painted, ms of it after the data was decoded], or None when the page did
    not paint within GIVE_UP_S."""
    try:
        chromium.open(path.as_uri(), limit_s=GIVE_UP_S)
        for _ in range(int(GIVE_UP_S / 0.05)):
            painted = chromium.evaluate(expression)
            if painted is not None:
                return [float(v) for v in painted]
            chromium.evaluate("new Promise((r) => setTimeout(r, 50))", await_promise=True)
    except ChromiumError:
        pass
    return None


def measure(pages: list[Page], loads: int = LOADS) -> Times:
    """Each page loaded `loads` times, in turn (a busy moment hits every page alike), each
    in a fresh browser; a page that never paints is given up after its first try."""
    times: Times = {name: [] for name, _, _ in pages}
    for _ in range(loads):
        for name, path, expression in pages:
            if None in times[name]:
                continue
            with Chromium(1280, 900) as chromium:
                times[name].append(painted_ms(chromium, path, expression))
                outside = [u for u in chromium.log.requests
                           if not u.startswith(("file:", "data:"))]
                if outside or chromium.log.errors:
                    print(f"{name}: requests {outside}, errors {chromium.log.errors[:3]}")
    return times


def print_table(pages: list[Page], times: Times, data_bytes: int) -> None:
    """One line per page: size, its code beside the data, median painted and charts ms."""
    reference = statistics.median(t[0] for t in times[pages[0][0]] if t is not None)
    print(f"{'page':<28} {'size MB':>8} {'code KB':>8} {'painted ms':>10} {'x empty':>8} "
          f"{'charts ms':>9}")
    for name, path, _ in pages:
        size = path.stat().st_size
        code_kb = max(0.0, (size - data_bytes) / 1024) if name != pages[0][0] else 0.0
        if None in times[name]:
            print(f"{name:<28} {size / 1e6:>8.2f} {code_kb:>8.0f} "
                  f"{'> ' + str(int(GIVE_UP_S * 1000)):>10} {'-':>8} {'-':>9}")
            continue
        painted = statistics.median(t[0] for t in times[name] if t is not None)
        charts = statistics.median(t[1] for t in times[name] if t is not None)
        print(f"{name:<28} {size / 1e6:>8.2f} {code_kb:>8.0f} {painted:>10.0f} "
              f"{painted / reference:>8.1f} {charts:>9.0f}", flush=True)


def data_bytes(page: Path) -> int:
    """Bytes of the report's embedded data (the JSON between its data script's tags)."""
    text = page.read_bytes()
    start = text.index(b'id="report-data">') + len(b'id="report-data">')
    return text.index(b"</script>", start) - start


def main() -> int:
    if CHROMIUM is None:
        print("skipped: chromium is not installed (apt-get install chromium)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        recording, report = folder / "run.sqlite", folder / "report.html"
        started = time.perf_counter()
        ticks = write_synthetic_recording(str(recording), STEPS)
        record_s = time.perf_counter() - started
        started = time.perf_counter()
        written = write_report(str(recording), str(report))
        report_s = time.perf_counter() - started
        print(f"recording: {STEPS} steps, {ticks} ticks, {recording.stat().st_size / 1e6:.1f} "
              f"MB (written in {record_s:.1f} s); report written in {report_s:.2f} s: "
              f"{written.bytes / 1e6:.2f} MB, {written.bytes / STEPS:.0f} B/step")
        empty = folder / "empty.html"
        empty.write_text(EMPTY[0])
        pages = [("empty page (reference)", empty, EMPTY[1]),
                 (f"report, {STEPS} steps", report, REPORT_PAINTED)]
        print_table(pages, measure(pages), data_bytes(report))
    print("painted: ms from navigation to the first frame with every chart (median of "
          f"{LOADS} fresh browsers); charts: the part after the data was decoded; shared "
          "machine: compare the ratio to the empty page, not the absolute ms.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
