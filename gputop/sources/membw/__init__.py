"""Host memory bandwidth: the ladder (resctrl MBM, perf uncore, core PMU, the canary's
estimate) and the monitor; where no rung can measure, samples say n/a and why, never a number."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputop.core.model import MemoryBandwidthSample
from gputop.sources import procfs
from gputop.sources.membw import canary, estimate, hardware
from gputop.sources.membw.dimm_check import check_layout, read_layout
from gputop.sources.membw.dimm_slots import MemoryLayout, compare_peak

if TYPE_CHECKING:
    from gputop.sources.membw.perf_event import PerfLayer

MODES = ("off", "auto", "estimate")

__all__ = ["MODES", "MemoryBandwidthMonitor", "open_membw_source"]


class MemoryBandwidthMonitor:
    """One rung (a hardware meter or the canary) or none (`why`: each rung's refusal), plus
    PSI, vmstat and the layout check (read once: modules do not move while running)."""

    def __init__(self, meter: hardware.TrafficMeter | None,
                 estimator: estimate.CanaryEstimator | None,
                 proc_root: Path | str = "/proc", layout: MemoryLayout | None = None,
                 why: tuple[str, ...] = (), clock: Callable[[], float] = time.monotonic,
                 limits: str | None = None) -> None:
        if meter is not None and estimator is not None:
            raise ValueError("at most one of meter and estimator")
        self.meter, self.estimator, self.proc_root = meter, estimator, Path(proc_root)
        self.layout, self.layout_check = layout, check_layout(layout)
        self._expected = layout.expected_peak_bytes_per_s if layout else None
        self._summary = layout.summary() if layout and layout.modules else None
        self.why, self.limits = why, limits
        self._vmstat = estimate.VmstatReader(proc_root, clock)
        self._psi = procfs.KeptFile(str(self.proc_root / "pressure/memory"))
        self._traffic = hardware.Traffic(None, None, None)

    @property
    def source(self) -> str:
        """The rung's label, as it appears in every sample."""
        if self.meter is not None:
            return self.meter.source
        return "estimate" if self.estimator is not None else "none"

    def sample(self) -> MemoryBandwidthSample:
        """Read the rung and the kernel's pressure counters (the canary only when it is due)."""
        psi = estimate.parse_psi(self._psi.text() or "")
        vm, expected = self._vmstat.read(), self._expected
        if self.meter is not None:
            fields = self._hardware(self.meter, expected)
        elif self.estimator is not None:
            fields = self._estimate(self.estimator)
        else:
            fields = {"confidence": "unavailable", "note": _joined(
                *self.why, compare_peak(None, self.layout)) or "no memory-bandwidth source"}
        return MemoryBandwidthSample(
            source=self.source, psi_some_avg10=psi.some_avg10, psi_full_avg10=psi.full_avg10,
            swap_in_per_s=vm.swap_in_per_s, major_faults_per_s=vm.major_faults_per_s,
            expected_peak_bytes_per_s=expected, layout_check=self.layout_check,
            layout=self._summary, **fields)

    def _hardware(self, meter: hardware.TrafficMeter, expected: float | None) -> dict[str, Any]:
        self._traffic = t = meter.read() or self._traffic
        pressure = (min(1.0, t.total_bytes_per_s / expected)
                    if expected and t.total_bytes_per_s is not None else None)
        return {
            "confidence": meter.confidence, "read_bytes_per_s": t.read_bytes_per_s,
            "write_bytes_per_s": t.write_bytes_per_s, "total_bytes_per_s": t.total_bytes_per_s,
            "peak_bytes_per_s": expected, "pressure": pressure, "top_consumers": t.top,
            "note": _joined(meter.detail, t.note, compare_peak(None, self.layout)),
            "relative_to": f"the modules' theoretical peak {expected / 1e9:.1f} GB/s "
            f"({self.layout.source})"
            if pressure is not None and expected and self.layout is not None else None,
        }

    def _estimate(self, estimator: estimate.CanaryEstimator) -> dict[str, Any]:
        estimator.tick()
        why = "no hardware counters: " + ", ".join(self.why) if self.why else None
        layout_note = compare_peak(None, self.layout)
        if estimator.calibration is None:
            state = estimator.failure or "calibrating the canary's idle peak (about a second)"
            return {"note": _joined(state, layout_note, why),
                    "confidence": "calibrating" if estimator.calibrating else "unavailable"}
        if estimator.unsettled is not None:
            state = ("no idle peak to compare with: the canary calibrated while the machine "
                     f"was busy ({estimator.unsettled}) and none is kept for this machine; "
                     "it recalibrates at a quiet moment")
            return {"confidence": "uncalibrated", "canary_bytes_per_s": estimator.bandwidth,
                    "note": _joined(state, layout_note, why)}
        measured = 2.0 * estimator.calibration.aggregate_bytes_per_s  # read + written
        return {
            "confidence": "estimated", "peak_bytes_per_s": estimator.peak or None,
            "measured_peak_bytes_per_s": measured, "canary_bytes_per_s": estimator.bandwidth,
            "pressure": estimator.pressure,
            "note": _joined("pressure estimated from a timed copy against its idle peak",
                            self.limits, compare_peak(measured, self.layout),
                            estimator.memory_problem, why),
            "relative_to": f"canary's idle peak {estimator.peak / (1 << 30):.1f} GiB/s, "
            f"{estimator.origin}",
        }

    def close(self) -> None:
        """Close counters; stop and join the calibration thread and unmap the canary."""
        if self.meter is not None:
            self.meter.close()
        if self.estimator is not None:
            self.estimator.close()


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def open_membw_source(
    mode: str = "auto", *, sys_root: Path | str = "/sys", proc_root: Path | str = "/proc",
    resctrl_root: Path | str = "/sys/fs/resctrl", udev_root: Path | str = "/run/udev/data",
    period_s: float = estimate.DEFAULT_PERIOD_S, state_dir: Path | str | None = None,
    perf: PerfLayer | None = None,
) -> MemoryBandwidthMonitor | None:
    """The best memory-bandwidth source allowed here; mode 'off' gives None, bad modes ValueError.

    Opening is cheap: the first sample starts the canary's calibration thread. `perf` stands
    in for the kernel's perf_event layer (tests: fixture trees never reach the kernel).
    """
    if mode not in MODES:
        raise ValueError(f"--membw must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return None
    layout = read_layout(udev_root, sys_root)
    why: list[str] = []
    for meter, reason in (hardware_rungs(sys_root, proc_root, resctrl_root, perf)
                          if mode == "auto" else ()):
        if meter is not None:
            return MemoryBandwidthMonitor(meter, None, proc_root, layout)
        why.append(reason)
    llc = canary.llc_bytes(sys_root)
    if llc is None and Path(sys_root) == Path("/sys"):  # getconf speaks for this machine only
        llc = canary.getconf_llc_bytes()
    plan = canary.plan_canary(llc)
    if plan.footprint is None:
        return MemoryBandwidthMonitor(None, None, proc_root, layout, (plan.reason, *why))
    from gputop.sources.membw.idlepeak import PeakStore, QuietMeter, default_state_dir, machine_key

    directory = state_dir if state_dir is not None else default_state_dir()
    key = machine_key(proc_root, layout.summary() if layout and layout.modules else None,
                      f"{plan.footprint}/{plan.chunk}")
    estimator = estimate.CanaryEstimator(
        canary.Canary(plan.footprint, plan.chunk), period_s, quiet=QuietMeter(proc_root),
        memory=PeakStore(directory, key) if directory is not None else None)
    return MemoryBandwidthMonitor(None, estimator, proc_root, layout, tuple(why),
                                  limits=plan.reason)


def hardware_rungs(sys_root: Path | str, proc_root: Path | str, resctrl_root: Path | str,
                   perf: PerfLayer | None) -> Iterator[tuple[hardware.TrafficMeter | None, str]]:
    """Each hardware rung, best first, opened only when the one before refused: (meter, '') or
    (None, why not); a perf rung's module is imported only where its PMU is listed."""
    yield hardware.open_resctrl(resctrl_root)
    names = hardware.pmu_names(sys_root)
    if not any(hardware.is_uncore_pmu(n) for n in names):
        yield None, hardware.NO_UNCORE_PMU
    else:
        from gputop.sources.membw.uncore import open_uncore

        yield open_uncore(sys_root, proc_root, *(() if perf is None else (perf.open,)))
    if not any(hardware.is_core_pmu(n) for n in names):
        yield None, hardware.NO_CORE_PMU
        return
    from gputop.sources.membw.corepmu import open_core_pmu

    yield open_core_pmu(sys_root, proc_root, *(() if perf is None else (perf.open, perf.ring)))
