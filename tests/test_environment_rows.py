"""The report's environment section: each recorded fact as the row a reader sees, in its order,
in its units, and with no path of the machine that ran."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.formatting import GIB
from bloomperf.render.report.environment import (
    environment_rows,
    gib,
    plots_note,
    shown_baseline,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def rows_of(environment: dict[str, Any]) -> dict[str, str]:
    return dict(environment_rows(environment))


def test_a_full_environment_reads_in_its_order_and_its_units() -> None:
    environment = {
        "other_bytes": 3 * GIB,
        "provenance": {
            "git": {"commit": COMMIT, "branch": "main", "dirty": False},
            "ci_run_url": "https://ci.example/run/7",
            "command": "pytest -m gpu",
        },
        "topology": "8xA100-SXM4-80GB",
        "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
        "driver": "535.104",
        "cuda_driver": "12.2",
        "cuda_torch": "12.1",
        "nccl": "2.18.1",
        "cpu_model": "AMD EPYC 7742",
        "cpu_cores": 128,
        "ram_bytes": 2048 * GIB,
        "hostname": "node-1",
        "python": "3.11.9",
        "packages": {"torch": "2.4.0", "deepspeed": "0.14.4"},
        "later": None,
    }
    assert environment_rows(environment) == [
        ("bloomperf commit", "0123456789ab (on main; clean)"),
        ("CI run", "https://ci.example/run/7"),
        ("Command", "pytest -m gpu"),
        ("Topology", "8xA100-SXM4-80GB"),
        ("GPUs", "8 × NVIDIA A100-SXM4-80GB"),
        ("NVIDIA driver", "535.104"),
        ("CUDA (driver)", "12.2"),
        ("CUDA (torch)", "12.1"),
        ("NCCL", "2.18.1"),
        ("CPU", "AMD EPYC 7742, 128 cores"),
        ("RAM", "2,048 GiB"),
        ("Host", "node-1"),
        ("Python", "3.11.9"),
        ("package deepspeed", "0.14.4"),
        ("package torch", "2.4.0"),
        ("other_bytes", "3.0 GiB"),
        ("later", "–"),
    ]


def test_an_empty_environment_has_no_rows() -> None:
    assert environment_rows({}) == []
    assert environment_rows({"provenance": {}, "packages": {}, "gpus": [], "gpu_limits": []}) == []


@pytest.mark.parametrize(
    ("git", "shown"),
    [
        ({"commit": COMMIT}, "0123456789ab"),
        ({"commit": COMMIT, "dirty": True}, "0123456789ab (dirty: uncommitted edits)"),
        ({"commit": COMMIT, "dirty": False}, "0123456789ab (clean)"),
        ({"commit": COMMIT, "branch": "HEAD", "dirty": False}, "0123456789ab (clean)"),
        ({"commit": COMMIT, "branch": "nightly"}, "0123456789ab (on nightly)"),
        (
            {"commit": COMMIT, "branch": "nightly", "dirty": True},
            "0123456789ab (on nightly; dirty: uncommitted edits)",
        ),
        ({"branch": "main"}, "unknown (not a git checkout)"),
        ({}, "unknown (not a git checkout)"),
    ],
)
def test_the_commit_row_says_branch_and_state_when_known(git: dict[str, Any], shown: str) -> None:
    rows = environment_rows({"provenance": {"git": git, "tool": "bloomperf"}})
    assert rows == [("bloomperf commit", shown)]


def test_no_provenance_means_no_commit_row() -> None:
    assert "bloomperf commit" not in rows_of({"topology": "cpu"})


@given(st.lists(st.sampled_from(["A100", "H100", "H200"]), min_size=1, max_size=9))
def test_gpus_are_counted_by_name_in_the_order_first_seen(names: list[str]) -> None:
    counted = [f"{names.count(n)} × {n}" for n in dict.fromkeys(names)]
    assert rows_of({"gpus": names})["GPUs"] == ", ".join(counted)


LIMIT = {"sm_clock_max_mhz": 1410, "mem_clock_max_mhz": 1593.0, "power_limit_w": 400}
LIMIT_TEXT = "SM clock ≤ 1410 MHz, memory clock ≤ 1593 MHz, power limit 400 W"


@given(st.integers(1, 8))
def test_equal_limits_are_one_row_for_all_gpus(count: int) -> None:
    limits = [{"index": i, **LIMIT} for i in range(count)]
    assert environment_rows({"gpu_limits": limits}) == [(f"GPU limits (all {count})", LIMIT_TEXT)]


def test_different_limits_are_a_row_per_gpu_and_unknown_ones_are_said() -> None:
    limits = [
        {"index": 0, **LIMIT},
        {"index": 1, **LIMIT, "power_limit_w": 300},
        {"index": 2, "sm_clock_max_mhz": None, "power_limit_w": None},
        {"index": 3, "ecc": "on"},
        "not a limit",
    ]
    assert environment_rows({"gpus": ["H100"] * 4, "gpu_limits": limits}) == [
        ("GPUs", "4 × H100"),
        ("GPU 0 limits", LIMIT_TEXT),
        ("GPU 1 limits", LIMIT_TEXT.replace("400 W", "300 W")),
        ("GPU 2 limits", "not reported"),
        ("GPU 3 limits", "ecc on"),
    ]


@pytest.mark.parametrize(
    ("cpu", "shown"),
    [
        ({"cpu_model": "Xeon", "cpu_cores": 2}, "Xeon, 2 cores"),
        ({"cpu_model": "Xeon"}, "Xeon"),
        ({"cpu_cores": 16}, "16 cores"),
        ({"cpu_model": "", "cpu_cores": 0}, None),
    ],
)
def test_the_cpu_row_joins_what_is_known(cpu: dict[str, Any], shown: str | None) -> None:
    assert rows_of(cpu).get("CPU") == shown


def test_nvml_reason_and_versions_have_their_own_words() -> None:
    rows = rows_of({"nvml_reason": "NVML Shared Library Not Found", "nccl": "2.21"})
    assert rows == {"NCCL": "2.21", "No GPU because": "NVML Shared Library Not Found"}


@given(st.integers(0, 4096 * GIB))
def test_sizes_are_gib_with_one_decimal_below_ten(size: int) -> None:
    shown = gib(size)
    number = float(shown.removesuffix(" GiB").replace(",", ""))
    if size >= 10 * GIB:
        assert shown == f"{round(size / GIB):,} GiB" or abs(number - size / GIB) <= 0.5
        assert "." not in shown
    else:
        assert shown == f"{size / GIB:.1f} GiB"
    assert abs(number - size / GIB) <= 0.5


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (10 * GIB - 1, "10.0 GiB"),
        (10 * GIB, "10 GiB"),
        (int(10.5 * GIB), "10 GiB"),
        (int(9.96 * GIB), "10.0 GiB"),
        (1536 * GIB, "1,536 GiB"),
    ],
)
def test_ten_gib_is_where_the_decimal_goes(size: int, shown: str) -> None:
    assert gib(size) == shown


def test_ram_that_is_not_a_whole_number_of_bytes_is_left_out() -> None:
    assert "RAM" not in rows_of({"ram_bytes": "64 GB"})
    assert rows_of({"ram_bytes": 9 * GIB})["RAM"] == "9.0 GiB"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (5 * GIB, "5.0 GiB"),
        ([1, "two", None], "1, two, –"),
        ([{"a": 1}], '[{"a": 1}]'),
        ({"a": [1, 2], "b": "x"}, '{"a": [1, 2], "b": "x"}'),
        ("plain", "plain"),
        (None, "–"),
        (3.5, "3.5"),
    ],
)
def test_a_key_the_report_does_not_know_is_shown_as_recorded(value: Any, shown: str) -> None:
    key = "extra_bytes" if value == 5 * GIB else "extra"
    assert environment_rows({key: value}) == [(key, shown)]
    if isinstance(value, dict):
        assert json.loads(shown) == value


def test_bytes_of_an_unknown_key_only_when_its_name_says_so() -> None:
    assert rows_of({"extra": 5 * GIB})["extra"] == str(5 * GIB)
    assert rows_of({"extra_bytes": "5"})["extra_bytes"] == "5"


@given(
    st.sampled_from(["/home/alice", "/Users/bob", "/root"]),
    st.sampled_from(["/x", "/", " x", ""]),
)
def test_a_home_folder_is_a_tilde_wherever_it_starts_a_path(home: str, after: str) -> None:
    command = f"bloomperf run --output {home}{after}"
    shown = rows_of({"provenance": {"command": command}})["Command"]
    assert shown == f"bloomperf run --output ~{after}"


@pytest.mark.parametrize("path", ["/rootfs/x", "/roots", "/home", "/Users/"])
def test_a_name_that_only_starts_like_a_home_folder_is_kept(path: str) -> None:
    assert rows_of({"provenance": {"command": f"ls {path}"}})["Command"] == f"ls {path}"


@pytest.mark.parametrize("before", ["a", ".", "~", "-", "_"])
def test_a_home_like_path_inside_another_path_is_kept(before: str) -> None:
    command = f"run /data{before}/home/alice/x"
    assert rows_of({"provenance": {"command": command}})["Command"] == command


def test_the_working_folder_and_checkout_become_relative_longest_first() -> None:
    prov = {
        "cwd": "/srv/ci/checkout/sub/",
        "git": {"root": "/srv/ci/checkout", "commit": COMMIT},
        "command": (
            "bloomperf report /srv/ci/checkout/sub/r.json /srv/ci/checkout/x /srv/ci/checkout"
        ),
    }
    rows = rows_of({"provenance": prov, "extra": "/srv/ci/checkout/sub"})
    assert rows["Command"] == "bloomperf report r.json x ."
    assert rows["extra"] == "."


@pytest.mark.parametrize(
    ("url", "linked"),
    [
        ("https://github.com/o/r/actions/runs/1", True),
        ("http://github.com/o/r/actions/runs/1", False),
        ("https://x/a) [y](javascript:alert(1)", False),
        ("https://x/a b", False),
        (None, False),
        (17, False),
    ],
)
def test_the_plots_note_links_only_a_plain_https_address(url: Any, linked: bool) -> None:
    note = plots_note({"provenance": {"ci_run_url": url}})
    assert ("[the CI run](" in note) == linked
    if linked:
        assert f"(the report artifact of [the CI run]({url}), a checkout)" in note
    else:
        assert "(the report artifact, a checkout)" in note
    assert note.startswith("Plots: the PNG files in this report's folder, linked by file name,")
    assert note.endswith(
        " A GitHub step summary cannot show local images: open the artifact, or its"
        " index.html, which embeds them."
    )
    assert note == plots_note({"provenance": {"ci_run_url": url}, "other": 1})


@pytest.mark.parametrize(
    ("cwd", "root", "command", "shown"),
    [
        # The checkout ends in a folder named like the working folder: the longer goes first.
        ("/w", "/srv/w", "run /srv/w/x /w/y", "run x y"),
        ("/srv/w", "/w", "run /srv/w/x /w/y", "run x y"),
        ("/data/BOX/", "/data", "run /data/BOX/r.json /data/z", "run r.json z"),
        ("/data/BOX", None, "run /data/BOX", "run ."),
    ],
)
def test_each_recorded_folder_is_relative_whatever_its_name(
    cwd: str, root: str | None, command: str, shown: str
) -> None:
    prov = {"cwd": cwd, "git": {"root": root} if root else {}, "command": command}
    assert rows_of({"provenance": prov})["Command"] == shown


def test_plots_note_without_provenance_has_no_link() -> None:
    assert "(the report artifact, a checkout)" in plots_note({})


@pytest.mark.parametrize(
    ("baseline", "shown"),
    [
        ("/home/alice/baselines/8xA100.bloom-176b.json", "8xA100.bloom-176b.json"),
        ("baselines/cpu.tiny.json", "baselines/cpu.tiny.json"),
        ("the shipped baseline", "the shipped baseline"),
    ],
)
def test_a_baseline_is_shown_by_its_name_when_its_path_is_absolute(
    baseline: str, shown: str
) -> None:
    assert shown_baseline(baseline) == shown
