"""PMU discovery and event encoding from fixture sysfs trees (Intel IMC, AMD UMC, AMD DF)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.sources.membw.hardware import parse_cpulist, read_cpu_id
from gputop.sources.membw.uncore import (
    PmuEvent,
    bytes_per_count,
    discover_pmus,
    encode_event,
    parse_format,
    plan_uncore,
    traffic_from_sums,
)

FIX = Path(__file__).parent / "fixtures" / "membw"


def test_format_and_cpulist_parsing() -> None:
    assert parse_format("config:0-7,32-35\n") == (("config", 0, 7), ("config", 32, 35))
    assert parse_format("config1:18") == (("config1", 18, 18),)
    with pytest.raises(ValueError):
        parse_format("bogus:0-7")
    assert parse_cpulist("0-2,8\n") == (0, 1, 2, 8)
    assert parse_cpulist("0,28") == (0, 28)
    assert parse_cpulist("") == ()


def test_encoding_spreads_values_over_split_ranges() -> None:
    formats = {"event": parse_format("config:0-7,32-35"), "umask": parse_format("config:8-15")}
    assert encode_event("event=0x107,umask=0x38", formats) == (0x1_0000_3807, 0, 0)
    assert encode_event("event=0x07,umask=0x38", formats) == (0x3807, 0, 0)
    with pytest.raises(ValueError):
        encode_event("event=0x1007", formats)  # 13 bits do not fit 12
    with pytest.raises(ValueError):
        encode_event("event=0x1,cmask=2", formats)  # no such format
    flag = {"edge": parse_format("config:18")}
    assert encode_event("edge", flag) == (1 << 18, 0, 0)


def test_scale_and_unit_give_bytes_per_count() -> None:
    assert bytes_per_count(PmuEvent("x", 6.103515625e-5, "MiB")) == pytest.approx(64.0)
    assert bytes_per_count(PmuEvent("x", 64.0, "Bytes")) == 64.0
    assert bytes_per_count(PmuEvent("x")) == 64.0
    with pytest.raises(ValueError):
        bytes_per_count(PmuEvent("x", 1.0, "furlongs"))


def test_intel_server_imc_uses_cas_counts_on_each_socket_cpu() -> None:
    pmus = discover_pmus(FIX / "sys-intel-imc")
    assert [p.name for p in pmus] == ["uncore_imc_0", "uncore_imc_1", "uncore_imc_free_running_0"]
    imc0 = pmus[0]
    assert imc0.type == 24 and imc0.cpus == (0, 28)
    assert imc0.events["cas_count_read"].scale == pytest.approx(6.103515625e-5)
    assert "cas_count_read.scale" not in imc0.events
    plan = plan_uncore(pmus, read_cpu_id(FIX / "proc-perfmon"))
    assert plan is not None and plan.source == "perf-uncore-imc"
    assert [(e.pmu, e.event, e.config[0], e.direction) for e in plan.events] == [
        ("uncore_imc_0", "cas_count_read", 0x0304, "read"),
        ("uncore_imc_0", "cas_count_write", 0x0C04, "write"),
        ("uncore_imc_1", "cas_count_read", 0x0304, "read"),
        ("uncore_imc_1", "cas_count_write", 0x0C04, "write"),
    ]  # the free-running PMU is not added on top: no double counting
    assert all(e.bytes_per_count == pytest.approx(64.0) for e in plan.events)


def test_intel_client_free_running_counters() -> None:
    plan = plan_uncore(discover_pmus(FIX / "sys-intel-client"))
    assert plan is not None and "free-running" in plan.detail
    assert {(e.event, e.config[0]) for e in plan.events} == {("data_read", 0x20FF),
                                                             ("data_write", 0x30FF)}


def test_amd_umc_uses_builtin_cas_events_with_the_sysfs_format() -> None:
    pmus = discover_pmus(FIX / "sys-amd-umc")
    plan = plan_uncore(pmus, read_cpu_id(FIX / "proc-zen4"))
    assert plan is not None and plan.source == "perf-amd-umc"
    assert [(e.pmu, e.event, e.config[0]) for e in plan.events] == [
        ("amd_umc_0", "umc_cas_cmd.rd", 0x10A), ("amd_umc_0", "umc_cas_cmd.wr", 0x20A),
        ("amd_umc_1", "umc_cas_cmd.rd", 0x10A), ("amd_umc_1", "umc_cas_cmd.wr", 0x20A),
    ]


def test_amd_df_on_zen2_counts_eight_dram_channels_as_total() -> None:
    cpu = read_cpu_id(FIX / "proc-zen2")
    assert cpu == ("AuthenticAMD", 23, 49)
    plan = plan_uncore(discover_pmus(FIX / "sys-amd-df"), cpu)
    assert plan is not None and plan.source == "perf-amd-df"
    assert len(plan.events) == 8 and {e.direction for e in plan.events} == {"total"}
    assert plan.events[4].config[0] == 0x1_0000_3807  # event 0x107: bits 8+ go to config:32-35


def test_amd_df_events_are_not_guessed_on_zen4() -> None:
    only_df = [p for p in discover_pmus(FIX / "sys-amd-umc") if p.name == "amd_df"]
    assert plan_uncore(only_df, read_cpu_id(FIX / "proc-zen4")) is None


def test_traffic_from_sums() -> None:
    split = traffic_from_sums({"read": 2e9, "write": 1e9, "total": 0.0}, 2.0)
    assert split == (1e9, 0.5e9, 1.5e9, None, ())
    total = traffic_from_sums({"read": 0.0, "write": 0.0, "total": 4e9}, 2.0, unseen=1)
    assert total.total_bytes_per_s == 2e9 and total.read_bytes_per_s is None
    assert total.note == "1 counter(s) not scheduled"


def test_missing_sysfs_gives_no_pmus() -> None:
    assert discover_pmus(FIX / "nowhere") == []
