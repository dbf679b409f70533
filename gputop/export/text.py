"""The readable `--once` snapshot: nvidia-smi and top in one printout."""

from __future__ import annotations

import time
import unicodedata
from typing import TextIO

from gputop.analysis.foreign_gpu_pids import match_line, outside_line
from gputop.analysis.grouping import is_kernel_thread
from gputop.analysis.steps import (
    BAND_WORDS,
    NO_DATA_PHASE,
    OUTLIER_FACTOR,
    other_parts,
    part_words,
    share_of,
    step_time_words,
    steps_of_verdict,
    verdict_share,
    verdict_site,
)
from gputop.core import fmt
from gputop.core.mig import process_places, processes_on
from gputop.core.model import (
    AttachState,
    Frame,
    GpuSample,
    MemoryBandwidthSample,
    ProcessSample,
    StepSummary,
    TrainerConfig,
)

TOP_PROCESSES = 15

# What gputop's own non-ASCII glyphs become where the output cannot carry them.
_ASCII_SUBSTITUTES = str.maketrans({
    **dict.fromkeys(map(chr, range(0x2580, 0x25A0)), "#"),  # block elements: bars, sparklines
    "\u2014": "-", "\u2013": "-", "\u2500": "-", "\u2026": "...", "\u2192": "->",
    "\u2190": "<-", "\u2194": "<->", "\u2191": "^", "\u2193": "v", "\u00b5": "u",
    "\u00b0": "deg", "\u00b7": ".", "\u2265": ">=", "\u2264": "<=", "\u2248": "~",
    "\u00d7": "x", "\u2502": "|", "\u251c": "|", "\u2514": "`", "\u258f": "|",
    "\u2595": "|", "\u25c6": "*", "\u25cf": "*", "\u25b2": "^", "\u25bc": "v",
    "\u25b8": ">", "\u25be": "v", "\u25c0": "<", "\u2716": "x", "\u00a0": " ",
})


def render(frame: Frame, width: int = 100) -> str:
    """The whole frame as plain text lines."""
    lines = [*_header(frame), "", *_gpus(frame), *_foreign(frame), ""]
    if frame.trainers:
        lines += [*_trainers(frame), ""]
    lines += [*_processes(frame, width), ""]
    if frame.memory_bandwidth is not None:
        lines += [_membw(frame), ""]
    for state in frame.attached:
        lines += [*_attached(state, _straggler_pid(frame)), ""]
    if frame.advice:
        lines += [*_advice(frame), ""]
    return "\n".join(lines).rstrip() + "\n"


def attach_summary(frame: Frame) -> str:
    """The attached trainers and the advice, for `gputop run` without a terminal."""
    slowest = _straggler_pid(frame)
    lines = [line for state in frame.attached for line in _attached(state, slowest)]
    if frame.advice:
        lines += _advice(frame)
    return "\n".join(lines) + "\n" if lines else ""


def _header(frame: Frame) -> list[str]:
    host = frame.host
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(frame.time))
    mem_used = host.memory_total_bytes - host.memory_available_bytes
    lines = [
        f"gputop — {host.hostname} — {stamp} — sampled over {frame.interval_s:.2f} s",
        f"CPU {fmt.percent(host.cpu_percent, 1)} of {host.cpu_count} cores   "
        f"load {host.load_average[0]:.2f} {host.load_average[1]:.2f} {host.load_average[2]:.2f}"
        f"   MEM {fmt.size(mem_used)} / {fmt.size(host.memory_total_bytes)}"
        f"   SWAP {fmt.size(host.swap_used_bytes)} / {fmt.size(host.swap_total_bytes)}"
        f"   up {fmt.uptime(host.uptime_s)}",
    ]
    banner = fmt.gpu_banner(frame.gpu)
    if banner:
        lines.insert(1, banner)
    return lines


def _gpus(frame: Frame) -> list[str]:
    if not frame.gpu.gpus:
        return ["GPUs: none"]
    name_w = max(24, *(len(g.name) for g in frame.gpu.gpus))  # every name whole
    lines = [f"{'GPU':>3}  {'NAME':<{name_w}} {'UTIL':>5}  {'MEMORY':<24} {'TEMP':>5}  "
             f"{'POWER':<13} PCIe RX / TX"]
    for g in frame.gpu.gpus:
        lines += [_gpu_line(g, name_w), *_mig_lines(g)]
    return lines


def _gpu_line(g: GpuSample, name_w: int = 24) -> str:
    if g.lost:
        return (f"{g.index:>3}  {g.name:<{name_w}} "
                "LOST: the GPU fell off the bus; no longer polled")
    memory = f"{fmt.size(g.memory_used_bytes)} / {fmt.size(g.memory_total_bytes)}"
    if g.memory_used_bytes is not None and g.memory_total_bytes:
        memory += f" ({100 * g.memory_used_bytes / g.memory_total_bytes:.0f}%)"
    temp = fmt.NA if g.temperature_c is None else f"{g.temperature_c:.0f}C"
    power = f"{_num(g.power_w)} / {_num(g.power_limit_w)} W"
    pcie = f"{fmt.rate(g.pcie_rx_bytes_per_s)} / {fmt.rate(g.pcie_tx_bytes_per_s)}"
    return (f"{g.index:>3}  {g.name:<{name_w}} {fmt.percent(g.util_percent):>5}  {memory:<24} "
            f"{temp:>5}  {power:<13} {pcie}")


def _foreign(frame: Frame) -> list[str]:
    """The NVML PIDs /proc does not show: each match and how it was made, else the line."""
    found = frame.foreign_gpu_pids
    matched = [line for f in found if (line := match_line(f)) is not None]
    outside = outside_line(found)
    return [f"  {line}" for line in (*matched, *([outside] if outside else []))]


def _mig_lines(g: GpuSample) -> list[str]:
    """A line per MIG instance of a GPU in MIG mode, with the PIDs on it."""
    lines = []
    for m in g.mig_instances:
        gi = fmt.NA if m.gpu_instance_id is None else m.gpu_instance_id
        ci = fmt.NA if m.compute_instance_id is None else m.compute_instance_id
        pids = " ".join(str(p.pid) for p in processes_on(g, m)) or "-"
        lines.append(f"       MIG {m.profile} gi {gi} ci {ci}  util {fmt.percent(m.util_percent)}"
                     f"  memory {fmt.size(m.memory_used_bytes)} / {fmt.size(m.memory_total_bytes)}"
                     f"  PIDs {pids}")
    return lines


def _trainers(frame: Frame) -> list[str]:
    by_pid = {p.pid: p for p in frame.processes}
    places = process_places(frame.gpu)  # its GPUs, or MIG instances, by name
    lines = ["TRAINERS"]
    for t in frame.trainers:
        trainer = by_pid.get(t.pid)
        command = _command(trainer) if trainer else "?"
        pin = "on" if t.pin_memory_thread else "off"
        lines.append(
            f"  {t.pid:>7}  {command[:50]}  workers {len(t.worker_pids)}"
            f"  workers %CPU {t.workers_cpu_percent:.0f}  threads {t.num_threads_total}"
            f"  pin-memory {pin}"
        )
        if t.worker_pids:
            lines.append(f"           worker PIDs: {' '.join(map(str, t.worker_pids))}")
        if t.pid in places:
            lines.append(f"           on {', '.join(places[t.pid])}")
    return lines


def _processes(frame: Frame, width: int) -> list[str]:
    listed = [p for p in frame.processes if not is_kernel_thread(p)]
    hidden = len(frame.processes) - len(listed)
    rows = sorted(listed, key=lambda p: (p.cpu_percent or 0.0), reverse=True)[:TOP_PROCESSES]
    kernel = f"; {hidden} kernel threads not listed" if hidden else ""
    lines = [f"PROCESSES (top {len(rows)} of {len(listed)} by %CPU{kernel})",
             f"{'PID':>7} {'USER':<9} {'ROLE':<8} {'%CPU':>6} {'THR':>4} {'RSS':>10} "
             f"{'GPU MEM':>10}  COMMAND"]
    for p in rows:
        cpu = fmt.NA if p.cpu_percent is None else f"{p.cpu_percent:.1f}"
        thr = fmt.NA if p.num_threads is None else str(p.num_threads)
        gpu_mem = "" if p.gpu_memory_bytes is None else fmt.size(p.gpu_memory_bytes)
        role = p.role + ("*" if p.has_probe else "")
        line = (f"{p.pid:>7} {(p.username or '—')[:9]:<9} {role:<8} {cpu:>6} {thr:>4} "
                f"{fmt.size(p.rss_bytes):>10} {gpu_mem:>10}  {_command(p)}")
        lines.append(line[:width])
    if any(p.has_probe for p in rows):
        lines.append("  * = runs under the gputop probe: gputop --attach PID shows its steps")
    return lines


def _membw(frame: Frame) -> str:
    m = frame.memory_bandwidth
    assert m is not None
    if m.pressure is None and m.total_bytes_per_s is None and m.read_bytes_per_s is None:
        kernel = (f"PSI some {_num(m.psi_some_avg10, 1)}%  swap-in {_num(m.swap_in_per_s, 1)}/s"
                  f"  major faults {_num(m.major_faults_per_s, 1)}/s")
        return f"MEMORY BANDWIDTH n/a — {m.note or m.confidence}\n  {kernel}" + _membw_extra(m)
    parts = [f"MEMORY BANDWIDTH ({_membw_label(m.source, m.confidence)})"]
    if m.read_bytes_per_s is not None or m.write_bytes_per_s is not None:
        parts.append(f"read {fmt.rate(m.read_bytes_per_s)} write {fmt.rate(m.write_bytes_per_s)}")
    elif m.total_bytes_per_s is not None:
        parts.append(f"total {fmt.rate(m.total_bytes_per_s)}")
    if m.pressure is not None:
        parts.append(f"pressure {m.pressure:.2f}"
                     + (f" ({m.relative_to})" if m.relative_to else ""))
    parts.append(f"peak {fmt.rate(m.peak_bytes_per_s)}")
    parts.append(f"PSI some {_num(m.psi_some_avg10, 1)}%")
    parts.append(f"swap-in {_num(m.swap_in_per_s, 1)}/s")
    parts.append(f"major faults {_num(m.major_faults_per_s, 1)}/s")
    line = "  ".join(parts)
    return line + (f"\n  {m.note}" if m.note else "") + _membw_extra(m)


def _membw_extra(m: MemoryBandwidthSample) -> str:
    """Lines for who made the traffic and how the memory modules are laid out."""
    lines = []
    if m.top_consumers:
        lines.append("top: " + ", ".join(f"{c.name or '?'} ({c.pid}) {fmt.rate(c.bytes_per_s)}"
                                         for c in m.top_consumers))
    check = m.layout_check
    if check is not None:
        detail = "; ".join(check.findings) or check.reason or ""
        counts = (f" {check.channels_populated} of {check.channels_total} channels"
                  if check.channels_total else "")
        lines.append(f"memory layout: {check.verdict}{counts}" + (f" — {detail}" if detail else ""))
    return "".join(f"\n  {line}" for line in lines)


def _membw_label(source: str, confidence: str) -> str:
    """Where the bandwidth figure comes from, in words ('estimate, estimated' said once)."""
    if source == "estimate":
        how = "estimated from a timed copy, no hardware counters"
        return how if confidence == "estimated" else f"{how}; {confidence}"
    return f"{source} counters, {confidence}"


def _straggler_pid(frame: Frame) -> int | None:
    return frame.straggler.pid if frame.straggler is not None else None


def _attached(state: AttachState, slowest: int | None) -> list[str]:
    s = state.summary
    c = state.config
    rank = "" if c.rank is None else f" rank {c.rank}/{_opt(c.world_size)}"
    head = f"ATTACHED {state.pid}{rank}" + _state_note(state)
    lines = [
        f"{head}: verdict {s.verdict} over the last {s.steps} steps, {_share(s)}"
        + ("  <- slowest: waits for input" if state.pid == slowest else ""),
        f"  step time: {step_time_words(s, fmt.duration_ns)}"
        + f", p95 {fmt.duration_ns(s.p95_step_ns)}, {_num(s.samples_per_s, 1)} samples/s, "
        f"dropped {state.dropped_records}",
        f"  settings: num_workers={_opt(c.num_workers)} {_pin(c)} "
        f"batch_size={_opt(c.batch_size)} threads={_opt(c.num_threads)} device={_opt(c.device)}",
    ]
    if state.error:
        lines.append(f"  {state.error}")
    return lines


def _share(s: StepSummary) -> str:
    """The verdict's own part's share in words, the other parts, the steps' own verdicts and
    any steps left out (the TUI's pane says the same)."""
    share = verdict_share(s)
    if share is None:
        if s.input_bound_percent is None:
            return f"input-bound n/a ({s.unmeasured_reason or NO_DATA_PHASE})"
        return other_parts(s)
    text = f"{part_words(s)} {fmt.percent(share, 1)} {share_of(s)}"
    if s.verdict == "data-bound":
        text += f" ({BAND_WORDS[s.band]})"
    site = verdict_site(s)
    if site:
        text += f": {site}"
    elif s.verdict == "compute-bound":
        text += f" ({other_parts(s)})"
    elif s.verdict == "cpu-starved" and (parts := other_parts(s)):
        text += f"; of step time {parts}"
    mine = steps_of_verdict(s)
    if mine is not None:
        text += f"; {_step_mix(s)}"
        if mine < 50.0:
            text += f" (fewer {s.verdict} steps, but most of the time)"
    if s.outlier_steps:
        text += (f"; {s.outlier_steps} slow steps (compute over {OUTLIER_FACTOR:.0f}x the "
                 "median) left out of the share")
    return text


def _step_mix(s: StepSummary) -> str:
    """'68% of steps data-bound, 32% compute-bound', the window's verdict first."""
    shares = [(s.verdict, steps_of_verdict(s))] + [
        (kind, share) for kind, share in (("data-bound", s.data_bound_steps_percent),
                                          ("compute-bound", s.compute_bound_steps_percent),
                                          ("host-bound", s.host_bound_steps_percent))
        if kind != s.verdict and share and (kind != "host-bound" or s.host_bound_steps)]
    first, *rest = (f"{share or 0:.0f}% {kind}" for kind, share in shares)
    return ", ".join([first.replace("% ", "% of steps ", 1), *rest])


def _pin(c: TrainerConfig) -> str:
    """pin_memory as it takes effect: pinning needs an accelerator to copy to."""
    if c.pin_memory and c.pin_memory_effective is False:
        return "pin_memory on, but no accelerator: has no effect"
    return f"pin_memory={_opt(c.pin_memory)}"


def _state_note(state: AttachState) -> str:
    """Nothing while running; says when the numbers are final or old, or what the trainer
    does outside its steps."""
    if state.state == "exited":
        return " (exited, final summary)"
    if state.state == "stalled":
        idle = "" if state.idle_s is None else f" for {state.idle_s:.0f} s"
        hung = ", in an evaluation" if state.activity == "evaluating" else ""
        return f" (STALLED: no step closed{idle}{hung}; the numbers are old)"
    if state.state in ("evaluating", "saving"):
        took = "" if state.activity_s is None else f" for {state.activity_s:.1f} s"
        return f" ({state.state}{took})"
    if state.step_in_progress_s is not None:
        return f" (step in progress {state.step_in_progress_s:.1f} s)"
    return ""


def _advice(frame: Frame) -> list[str]:
    lines = ["ADVICE"]
    for a in frame.advice:
        lines += [f"  [{a.severity}] {a.title}", f"      evidence: {a.evidence}",
                  f"      try: {a.action}"]
    return lines


def _command(p: ProcessSample) -> str:
    if not p.in_proc:
        return f"(pid {p.pid} not visible in this PID namespace)"
    return " ".join(p.cmdline) if p.cmdline else f"[{p.name}]"


def _num(value: float | None, digits: int = 0) -> str:
    return fmt.NA if value is None else f"{value:.{digits}f}"


def _opt(value: object) -> str:
    return fmt.NA if value is None else str(value)


def ascii_text(text: str) -> str:
    """`text` in ASCII: readable substitutes for gputop's glyphs, accents dropped, else '?'."""
    text = unicodedata.normalize("NFKD", text.translate(_ASCII_SUBSTITUTES))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return text.encode("ascii", "replace").decode("ascii")


def write_text(text: str, stream: TextIO) -> None:
    """Write `text` as it is where `stream` can encode all of it, else as ASCII: never fails."""
    encoding = getattr(stream, "encoding", None)
    if encoding is not None:
        try:
            text.encode(encoding)
        except (UnicodeError, LookupError):
            text = ascii_text(text)
    stream.write(text)
