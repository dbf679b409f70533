"""The report opened in headless Chromium: no request leaves the file, no console error, and
each chart's box in a screenshot holds what it drew; dragging across a chart and picking an
hour zoom every chart. One report of a real `gputop record` run of a real torch trainer
under the probe (the recorder's own test helper), one of 100 000 steps."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.chromium import CHROMIUM, Chromium, Image, decode_png, net_log_requests
from tests.helpers.cli import gputop
from tests.helpers.recording import record_counted_trainer
from tests.helpers.synthetic_recording import write_synthetic_recording

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")]

LEFT, RIGHT, TOP, AXIS = 58, 14, 8, 20  # report.js's margins around each plot
CHARTS = """Array.from(document.querySelectorAll("section.chart")).filter((s) => !s.hidden)
  .map((s) => { const r = s.querySelector(".plot").getBoundingClientRect();
    return { id: s.id, x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height,
             empty: gputopReport.charts.find((c) => c.id === s.id).empty }; })"""
RANGE = "document.getElementById('range').textContent"


def wait_ready(chromium: Chromium) -> None:
    """Until the page says its charts are painted (or fails: its title says why)."""
    for _ in range(600):
        if chromium.evaluate("document.body.dataset.ready === '1' || "
                             "document.title.startsWith('report error')"):
            return
        chromium.evaluate("new Promise((r) => setTimeout(r, 50))", await_promise=True)
    raise AssertionError("the report never finished drawing")


def coloured(image: Image) -> int:
    """Pixels inside the plot area (margins and axis left out) in a colour, not grey: what
    the series draw; the grid, the axes and the text are grey."""
    count = 0
    for y in range(TOP + 1, image.height - AXIS - 1):
        for x in range(LEFT + 1, image.width - RIGHT - 1):
            r, g, b, _ = image.pixel(x, y)
            count += max(r, g, b) - min(r, g, b) > 60
    return count


def inked(image: Image) -> int:
    """Pixels inside the plot area that are not white: text counts too."""
    return sum(1 for y in range(TOP + 1, image.height - AXIS - 1)
               for x in range(LEFT + 1, image.width - RIGHT - 1)
               if image.pixel(x, y)[:3] != (255, 255, 255))


def drawn_charts(chromium: Chromium) -> dict[str, tuple[Image, str | None]]:
    """Each visible chart's plot, cut from a screenshot, with the reason it is empty."""
    charts: list[dict[str, Any]] = chromium.evaluate(CHARTS)
    return {c["id"]: (decode_png(chromium.screenshot(
        {"x": c["x"], "y": c["y"], "width": c["width"], "height": c["height"]})), c["empty"])
        for c in charts}


def assert_offline_and_clean(chromium: Chromium, page: Path) -> None:
    assert chromium.log.requests == [page.as_uri()]
    assert chromium.log.errors == []
    assert not chromium.evaluate("document.title").startswith("report error")


def assert_page_requests_nothing(net_log: Path) -> None:
    """The network stack's own log: no request with the page as its initiator (the browser's
    update checks, mapped to nowhere, are "not an origin")."""
    from_page = [(url, who) for url, who in net_log_requests(str(net_log))
                 if who != "not an origin" and not url.startswith(("file:", "data:"))]
    assert from_page == []


def test_the_request_log_sees_a_page_that_fetches(tmp_path: Path) -> None:
    """The checks below are not blind: an image from the network shows in both logs."""
    page = tmp_path / "fetches.html"
    page.write_text('<!DOCTYPE html><img src="http://example.invalid/a.png">')
    with Chromium(net_log=str(tmp_path / "net.json")) as chromium:
        chromium.open(page.as_uri())
        chromium.evaluate("new Promise((r) => setTimeout(r, 300))", await_promise=True)
        assert "http://example.invalid/a.png" in chromium.log.requests
    assert ("http://example.invalid/a.png", "null") in net_log_requests(
        str(tmp_path / "net.json"))


def test_report_of_a_real_recording_draws_every_chart_offline(tmp_path: Path) -> None:
    recording = record_counted_trainer(tmp_path, min_steps=300).path
    page = tmp_path / "report.html"
    out = gputop("report", str(recording), "-o", str(page), timeout=120)
    assert out.returncode == 0, out.stderr
    with sqlite3.connect(recording) as db:
        gpus, advice = (db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                        for table in ("gpus", "advice"))
    expected_empty = ({"chart-membw"} | ({"chart-advice"} if not advice else set())
                      | ({"chart-gpu-util", "chart-gpu-memory"} if not gpus else set()))
    with Chromium(1280, 900, net_log=str(tmp_path / "net.json")) as chromium:
        chromium.open(page.as_uri())
        wait_ready(chromium)
        # the trainer with the most steps (other probed processes may have been attached)
        chromium.evaluate("""(() => { const s = document.getElementById('trainer');
            const steps = Array.from(s.options, (o) => Number(o.textContent.match(
              /\\((\\d+) steps\\)$/)[1]));
            s.value = String(steps.indexOf(Math.max(...steps)));
            s.dispatchEvent(new Event('change')); })()""")
        charts = drawn_charts(chromium)
        assert_offline_and_clean(chromium, page)
    assert_page_requests_nothing(tmp_path / "net.json")
    assert {"chart-overview", "chart-steps-0", "chart-gpu-util", "chart-gpu-memory",
            "chart-workers", "chart-membw", "chart-advice"} <= {
        name if not name.startswith(("chart-steps", "chart-share")) else
        name.rsplit("-", 1)[0] + "-0" for name in charts}
    assert {name for name, (_, empty) in charts.items() if empty} == expected_empty
    for name, (image, empty) in charts.items():
        if empty:
            assert inked(image) > 100, f"{name} does not say why it is empty"
        else:
            assert coloured(image) > 100, f"{name} drew nothing"


def test_a_series_at_its_charts_maximum_is_drawn_inside_the_frame(tmp_path: Path) -> None:
    """GPUs (or a host) busy 100 % all run long: the line shows, not hidden on the frame."""
    recording, page = tmp_path / "run.sqlite", tmp_path / "report.html"
    write_synthetic_recording(str(recording), 200, gpu_util=100.0)
    out = gputop("report", str(recording), "-o", str(page), timeout=120)
    assert out.returncode == 0, out.stderr
    with Chromium(1280, 900) as chromium:
        chromium.open(page.as_uri())
        wait_ready(chromium)
        charts = drawn_charts(chromium)
    for name in ("chart-overview", "chart-gpu-util"):
        assert coloured(charts[name][0]) > 100, f"{name}: a line at 100 % is not drawn"


def test_report_of_100000_steps_draws_and_zooms_offline(tmp_path: Path) -> None:
    recording, page = tmp_path / "run.sqlite", tmp_path / "report.html"
    write_synthetic_recording(str(recording), 100_000)
    out = gputop("report", str(recording), "-o", str(page), timeout=120)
    assert out.returncode == 0, out.stderr
    with Chromium(1280, 900, net_log=str(tmp_path / "net.json")) as chromium:
        chromium.open(page.as_uri())
        wait_ready(chromium)
        charts = drawn_charts(chromium)
        whole = chromium.evaluate(RANGE)
        box = chromium.evaluate(
            "(() => { const r = document.querySelector('#chart-steps-0 .plot')"
            ".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()")
        x, y, width, height = box
        drag_y = y + height / 2
        for kind, at in (("mousePressed", 0.25), ("mouseMoved", 0.4), ("mouseReleased", 0.5)):
            chromium.call("Input.dispatchMouseEvent", {
                "type": kind, "x": x + width * at, "y": drag_y, "button": "left",
                "buttons": 1 if kind != "mouseReleased" else 0, "clickCount": 1})
        dragged = chromium.evaluate(RANGE)
        zoomed = drawn_charts(chromium)
        chromium.evaluate("(() => { const h = document.getElementById('hour'); "
                          "h.selectedIndex = 2; h.dispatchEvent(new Event('change')); })()")
        hour = chromium.evaluate(RANGE)
        assert_offline_and_clean(chromium, page)
    assert_page_requests_nothing(tmp_path / "net.json")
    assert not any(empty for _, empty in charts.values())
    for name, (image, _) in charts.items():
        assert coloured(image) > 100, f"{name} drew nothing"
    with sqlite3.connect(recording) as db:
        hours = db.execute("SELECT (max(time) - min(time)) / 3600 FROM frames").fetchone()[0]
    assert whole.endswith(f"({hours:.1f} h)")
    assert dragged != whole and dragged.endswith(" min)")
    for name, (image, _) in zoomed.items():
        assert coloured(image) > 100, f"{name} drew nothing once zoomed"
    assert hour.endswith("(60 min)")
