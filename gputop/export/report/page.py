"""Assembles the report page: the recording's data as JSON, the hand-written canvas charts
(report.js) and their style (report.css), all inline in one HTML file.

The page fetches nothing: no library, font or image comes from anywhere, and its
Content-Security-Policy (`default-src 'none'`, the inline script and style allowed by
hash) makes the browser refuse any request the page might still try.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gputop import __version__
from gputop.core.masking import mask_command, mask_fact
from gputop.core.safe_files import PRIVATE, WriteRefused, replacing
from gputop.export.report.data import ReportError, report_data
from gputop.recording.reader import Recording, UnreadableRecording

# Runs before the charts' script, so even a script that fails to parse is reported: in the
# page (a red line) and in its title, where a headless browser's test reads it.
ON_ERROR = ("window.addEventListener('error',function(e){document.title='report error: '+"
            "e.message;var d=document.getElementById('error');d.hidden=false;"
            "d.textContent='This report failed to draw: '+e.message;});")


@dataclass(frozen=True)
class ReportFile:
    """What was written: where, how many bytes, and what the recording held."""

    path: str
    bytes: int
    ticks: int
    steps: int


def _asset(name: str) -> str:
    return resources.files("gputop.export.report").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _masked(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with secret-looking values in its command lines and trainer settings masked
    (the recorder masked them already; a recording made otherwise may not have)."""
    def named(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**row, "name": None if row.get("name") is None else mask_command(row["name"])}
                for row in rows]

    trainers = [{**t, "settings": [{**s, "values": [[k, mask_fact(str(k), v)]
                                                    for k, v in s["values"]]}
                                   for s in t.get("settings", ())]}
                for t in named(data["trainers"])]
    return {**data, "trainers": trainers, "workers": named(data["workers"])}


def render_page(data: dict[str, Any]) -> str:
    """The whole HTML page for `data` (report_data's dict)."""
    data = _masked(data)
    script, style = _asset("report.js"), _asset("report.css")
    # No "<" at all inside the data's script element: neither "</script>" nor "<!--<script"
    # (which would make the parser skip the real end tag) can appear there.
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    policy = (f"default-src 'none'; script-src {_sha256(ON_ERROR)} {_sha256(script)}; "
              f"style-src {_sha256(style)}; img-src data:; base-uri 'none'; form-action 'none'")
    start, end = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data[k]))
                  for k in ("start", "end"))
    host = data["host"].get("hostname") or "?"
    steps = sum(t["steps"] for t in data["trainers"])
    title = html.escape(f"gputop report: {data['file']} ({host}, {start})")
    summary = html.escape(
        f"{data['file']}: {host}, {start} to {end} (local time of the recording machine), "
        f"{data['ticks']} ticks, {len(data['gpus'])} GPU(s), {len(data['trainers'])} "
        f"trainer(s), {steps} steps (trainers of {_trainers_of(data['meta'])}); schema "
        f"{data['meta'].get('schema')}, recorded by gputop "
        f"{data['meta'].get('gputop_version')}, report by gputop {__version__}.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
<script>{ON_ERROR}</script>
</head><body>
<div id="error" hidden></div>
<header class="top"><h1>{title}</h1><p>{summary}</p></header>
<nav><button id="whole">whole run</button><button id="out">zoom out</button>
<button id="left">&larr;</button><button id="right">&rarr;</button>
<label>hour <select id="hour"><option value="">whole run</option></select></label>
<label hidden>trainer <select id="trainer"></select></label>
<span id="range"></span><span id="at"></span></nav>
<main><div id="charts"></div>
<section class="settings"><h2>Trainer settings</h2><div id="settings"></div></section>
</main>
<div id="tip" hidden></div>
<script type="application/json" id="report-data">{payload}</script>
<script>{script}</script>
</body></html>
"""


def _trainers_of(meta: dict[str, Any]) -> str:
    """Whose trainers the recording holds, as its meta row says (`user:NAME`, `all-users`)."""
    return str(meta.get("trainers_of") or "any user: recorded before gputop said whose")


def write_report(recording: str, out: str, mode: int = PRIVATE) -> ReportFile:
    """Make the report of `recording` at `out` (`mode`), all or nothing: written beside `out`
    first (so an unwritable place is found before the recording is read), then moved there."""
    try:
        with replacing(out, mode) as f, Recording(recording) as source:
            data = report_data(source)
            page = render_page(data).encode("utf-8")
            f.write(page)
    except UnreadableRecording as exc:
        raise ReportError(str(exc)) from None
    except WriteRefused as exc:
        raise ReportError(f"cannot write the report to {out}: {exc}") from None
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out}: {exc.strerror}") from None
    return ReportFile(out, len(page), data["ticks"], sum(t["steps"] for t in data["trainers"]))
