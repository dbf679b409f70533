"""The step record has one declaration (probe/ring.py FIELDS); the struct, the reader's
records, the probe's phases, the model's StepRecord and the JSON steps follow it by name."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from gputop.core.model import StepRecord
from gputop.export.snapshot import step_json
from gputop.probe import ring as ring_format
from gputop.probe.gpu_timing import GpuTimer
from gputop.probe.reader import RawRecord, RingReader
from gputop.probe.steps import PHASES, Recorder
from gputop.sources.attach import to_step

# DESIGN.md "JSON snapshot": attach.steps[] carries these keys
CONTRACT_STEP_KEYS = ("step", "duration_ns", "data_ns", "h2d_ns", "forward_ns", "backward_ns",
                      "optimizer_ns", "gpu_ns", "batch_size", "verdict")


def test_the_struct_and_the_readers_record_are_derived_from_the_field_names() -> None:
    assert ring_format.RECORD.size == 8 * len(ring_format.FIELDS) == ring_format.RECORD_SIZE
    assert (ring_format.FIELDS[0], ring_format.FIELDS[-1]) == ("seq", "check")
    assert ring_format.FIELDS[1:-1] == ring_format.PAYLOAD_FIELDS
    assert ring_format.PAYLOAD.size == 8 * len(ring_format.PAYLOAD_FIELDS)
    assert ring_format.FIELDS.index("check") == ring_format.CHECK_WORD
    # the reader's record: the index where the slot has its sequence, then the payload by name
    assert RawRecord._fields == ("index", *ring_format.PAYLOAD_FIELDS)
    for name in ("step", "start_ns", "duration_ns", "data_ns", "batch_size", "epoch", "flags",
                 "loader"):
        assert ring_format.FIELDS[getattr(ring_format, name.upper())] == name
    measured = ring_format.FIELDS[ring_format.DATA_NS : ring_format.BATCH_SIZE + 1]
    assert measured == ring_format.MEASURED_FIELDS


def test_the_partition_and_the_samplers_words_follow_the_fields() -> None:
    """Version 3: the step's partition and the stack sampler's counts and sites, then its
    parts' samples (a word the first version 3 probes left zero), in whole 64-byte lines (a
    record never straddles one more than it must)."""
    assert ring_format.VERSION == 3 and ring_format.RECORD_SIZE % 64 == 0
    tail = ring_format.FIELDS[ring_format.LOADER + 1 : ring_format.CHECK_WORD]
    assert tail == ("host_ns", "sync_ns", *ring_format.SAMPLED_FIELDS, "part_samples")
    assert ring_format.SAMPLED_FIELDS == ("samples", "host_site", "host_site_samples",
                                          "data_site", "data_site_samples")
    assert ring_format.FIELDS[ring_format.HOST_NS] == "host_ns"
    assert ring_format.FIELDS[ring_format.SYNC_NS] == "sync_ns"
    assert ring_format.FIELDS[ring_format.SAMPLES] == "samples"


def test_to_step_names_the_sites_from_the_metadata_table() -> None:
    values = dict.fromkeys(ring_format.PAYLOAD_FIELDS, 0)
    values.update(duration_ns=100, host_ns=60, sync_ns=ring_format.NONE, samples=9, host_site=2,
                  host_site_samples=5, data_site=7, data_site_samples=3,
                  flags=ring_format.F_AT_BACKWARD)
    sites: dict[str, object] = {"1": "a (x.py:1)", "2": "get_batch (train.py:116)\x1b[2J"}
    step = to_step(RawRecord(0, **values), sites=sites)
    assert (step.host_ns, step.sync_ns, step.samples) == (60, None, 9)
    assert step.at_backward and not to_step(RawRecord(0, **{**values, "flags": 0})).at_backward
    assert step.host_site is not None and step.host_site.startswith("get_batch (train.py:116)")
    assert "\x1b" not in step.host_site  # the trainer's text, escaped
    assert step.host_site_samples == 5
    assert step.data_site is None and step.data_site_samples == 3  # an id the table lacks
    assert to_step(RawRecord(0, **values)).host_site is None  # no table
    out = step_json(step)
    for name in ("host_ns", "sync_ns", "at_backward", *ring_format.SAMPLED_FIELDS):
        assert out[name] == getattr(step, name), name


def test_the_probes_phases_are_the_records_phase_fields_in_order() -> None:
    names = [f"{phase}_ns" for phase, _ in sorted(PHASES.items(), key=lambda kv: kv[1])]
    first = ring_format.FIELDS.index(names[0])
    assert list(ring_format.FIELDS[first : first + len(names)]) == names


def test_step_record_and_json_steps_carry_the_ring_fields_by_their_names() -> None:
    step_fields = {f.name for f in dataclasses.fields(StepRecord)}
    carried = {"step", "duration_ns", "epoch", *ring_format.MEASURED_FIELDS}
    assert carried <= set(ring_format.PAYLOAD_FIELDS) and carried <= step_fields
    assert set(CONTRACT_STEP_KEYS) - {"verdict"} <= carried
    values = {name: 1000 + 7 * k for k, name in enumerate(ring_format.PAYLOAD_FIELDS)}
    values["flags"] = ring_format.F_WARMUP
    step = to_step(RawRecord(5, **values))
    out = step_json(step)
    assert set(CONTRACT_STEP_KEYS) <= out.keys()
    for name in carried:
        assert getattr(step, name) == values[name] == out[name], name
    assert step.warmup and step.end_ns == values["start_ns"] + values["duration_ns"]


def test_each_phase_lands_in_the_field_of_its_name_on_both_write_paths(tmp_path: Path) -> None:
    """Distinct ns per phase, written by the CPU path and by the GPU timer's path."""
    timings = {phase: 100 * (k + 1) for k, phase in enumerate(PHASES)}
    for gpu in (False, True):
        path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
        rec = Recorder(functools.partial(ring_format.RingWriter, path))
        if gpu:
            rec.gpu = GpuTimer(_UnresolvedEvent, queue_size=2)
        try:
            rec.iteration_begin(1)
            rec.fetch_begin()
            rec.fetch_end(1, 24)
            for phase, ns in timings.items():
                rec.add_phase(PHASES[phase], ns)
            rec.step_end()
            if rec.gpu is not None:
                rec.gpu.flush(rec)
            rec.publish()
            assert rec.ring is not None
            reader = RingReader(rec.ring.path)
            (got,) = reader.read_new()
            reader.close()
        finally:
            rec.close()
        for phase, ns in timings.items():
            assert getattr(got, f"{phase}_ns") == ns, (gpu, phase)
        assert (got.step, got.batch_size, got.loader, got.gpu_ns, got.gpu_gap_ns) == (
            0, 24, 1, ring_format.NONE, ring_format.NONE)


class _UnresolvedEvent:
    """A CUDA event that never completes: steps are published with GPU times unknown."""

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return False

    def elapsed_time(self, end: object) -> float:
        raise RuntimeError("not completed")
