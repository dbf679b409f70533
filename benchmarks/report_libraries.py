"""How the report's charts were chosen: the same 100 000-step recording drawn by gputop's
own canvas renderer, by uPlot and by Plotly.js, each page inlined and opened offline in
headless Chromium; prints each page's size and the time until its charts are painted.

Not part of `make bench` (it needs the two libraries, which gputop does not ship). Fetch
them from their registries, then pass their files:

    npm pack uplot@1.6.32 && tar xzf uplot-1.6.32.tgz     # package/dist/uPlot.iife.min.js
    pip download --no-deps plotly==6.3.0 && unzip plotly-6.3.0-py3-none-any.whl \\
        plotly/package_data/plotly.min.js
    python benchmarks/report_libraries.py --uplot package/dist --plotly plotly/package_data

Every page draws the same series: the steps' phases stacked (6 x 100 000 points), the
per-step input share (100 000), and GPU util, GPU memory, worker CPU and memory pressure
(2 x 10 000 each). "painted" is the page's own performance.now() after its charts were
built and the next frame ran (requestAnimationFrame, then a task); the reference is an
empty page timed the same way in the same browser.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import EMPTY, PAINTED, REPORT_PAINTED, measure, print_table

from gputop.export.report.data import report_data
from gputop.export.report.page import write_report
from gputop.recording.reader import Recording
from tests.helpers.synthetic_recording import write_synthetic_recording

STEPS = 100_000

# Decodes the report's data into plain arrays: the part every candidate page shares.
PRELUDE = """
const D = JSON.parse(document.getElementById("report-data").textContent);
function dec(b, T) { const s = atob(b), u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i); return new T(u.buffer); }
const t = Array.from(dec(D.t, Float64Array));
const tr = D.trainers[0], end = Array.from(dec(tr.end, Float64Array));
const names = Object.keys(tr.phases);
const phases = names.map((n) => dec(tr.phases[n], Float32Array));
const stacks = []; let run = new Float64Array(end.length);
for (const p of phases) { run = run.map((v, i) => v + (p[i] || 0)); stacks.push(Array.from(run)); }
const inp = dec(tr.input, Float32Array), cmp = dec(tr.compute, Float32Array);
const share = Array.from(inp, (v, i) => 100 * v / (v + cmp[i]));
const lines = [["GPU util", D.gpus.map((g) => Array.from(dec(g.util, Float32Array)))],
  ["GPU memory", D.gpus.map((g) => Array.from(dec(g.memory, Float32Array)))],
  ["workers", [Array.from(dec(D.workers[0].cpu, Float32Array)),
               Array.from(dec(D.host_cores_busy, Float32Array))]],
  ["membw", [Array.from(dec(D.membw.pressure, Float32Array)),
             Array.from(dec(D.membw.psi_some, Float32Array))]]];
const COLORS = ["#d64545", "#f08c2e", "#3f7fe0", "#2aa198", "#8e5bd0", "#a8a8a8"];
function box() { const d = document.createElement("div"); document.body.append(d); return d; }
window.decoded = performance.now();
"""

UPLOT = """
const W = 1150;
const stacked = { width: W, height: 190, scales: { x: { time: true } },
  series: [{}].concat(names.map((n, j) =>
    ({ label: n, stroke: COLORS[j], fill: COLORS[j] })).reverse()) };
new uPlot(stacked, [end].concat(stacks.slice().reverse()), box());
new uPlot({ width: W, height: 150, series: [{}, { label: "share", stroke: "#222" }] },
  [end, share], box());
for (const [title, ys] of lines)
  new uPlot({ title, width: W, height: 150, series: [{}].concat(ys.map((_, i) =>
    ({ label: String(i), stroke: COLORS[i + 2] }))) },
    [t.map((x) => D.start + x)].concat(ys), box());
"""

PLOTLY = """
const layout = (h) => ({ width: 1150, height: h, margin: { l: 50, r: 10, t: 10, b: 30 },
  showlegend: false });
const config = { displaylogo: false, responsive: false };
const KIND = "%s";
Promise.all([
  Plotly.newPlot(box(), stacks.map((y, j) => ({ type: KIND, mode: "lines", x: end, y,
    fill: j ? "tonexty" : "tozeroy", line: { color: COLORS[j], width: 0 } })), layout(190), config),
  Plotly.newPlot(box(), [{ type: KIND, mode: "lines", x: end, y: share }], layout(150), config),
  ...lines.map(([, ys]) => Plotly.newPlot(box(), ys.map((y) => ({ type: KIND, mode: "lines",
    x: t, y })), layout(150), config))]).then(() => { %s });
"""


def page(library: str, body: str, payload: str, css: str = "") -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{css}</style>"
            f"<script>{library}</script></head><body>"
            f"<script type='application/json' id='report-data'>{payload}</script>"
            f"<script>{PRELUDE}{body}</script></body></html>")


LIBRARY_PAINTED = "window.painted ? [window.painted, window.painted - window.decoded] : null"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uplot", type=Path, help="folder holding uPlot.iife.min.js")
    parser.add_argument("--plotly", type=Path, help="folder holding plotly.min.js")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        recording = str(folder / "run.sqlite")
        write_synthetic_recording(recording, STEPS)
        with Recording(recording) as source:
            payload = json.dumps(report_data(source), separators=(",", ":"))
        empty = folder / "empty.html"
        empty.write_text(EMPTY[0])
        ours = folder / "gputop.html"
        write_report(recording, str(ours))
        pages = [("empty page (reference)", empty, EMPTY[1]),
                 ("gputop canvas (no library)", ours, REPORT_PAINTED)]
        if args.uplot:
            path = folder / "uplot.html"
            path.write_text(page((args.uplot / "uPlot.iife.min.js").read_text(),
                                 UPLOT + PAINTED, payload,
                                 (args.uplot / "uPlot.min.css").read_text()))
            pages.append(("uPlot 1.6.32", path, LIBRARY_PAINTED))
        if args.plotly:
            library = (args.plotly / "plotly.min.js").read_text()
            for kind in ("scattergl", "scatter"):
                path = folder / f"plotly-{kind}.html"
                path.write_text(page(library, PLOTLY % (kind, PAINTED), payload))
                pages.append((f"Plotly.js ({kind})", path, LIBRARY_PAINTED))
        print_table(pages, measure(pages), len(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
