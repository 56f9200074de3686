"""Run mutmut over the modules that decide verdicts and figures, one module at a time.

The curated canaries (``tests/canaries``) are the bugs someone thought of; mutmut writes every
small mutant of a module (an operator, a constant, a comparison, a dropped call) and runs the
tests that reach the mutated function. One module at a time, with only the test files that
cover it, in a scratch copy of the tree (mutmut writes its ``mutants/`` folder there), so that a
run fits a 2-core machine under a time budget. Prints one line per module (mutants = killed +
survived + every other status, ``judge.py``) and the names of the mutants left alive (``mutmut
show NAME`` in the scratch copy, kept with ``--keep``, prints one). A module in the survivor list
(``--survivors``) passes only when every mutant left alive is listed there; the mutants left in
the other modules may number at most ``--max-survivors``. Exit status: 0 when the run passes; 1
on a survivor not allowed, when a module runs past ``--budget``, or when a module's tests fail
without any mutant (mutmut's clean run); 2 bad usage.

    .venv/bin/python tests/mutation/run.py [--max-children 2] [--budget 3600]
        [--max-survivors N] [--survivors FILE] [--keep DIR] [--layer harness ...]
        [--shard K/N] [MODULE ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge import Tally, judge, load_survivors, parse_shard, shard

ROOT = Path(__file__).resolve().parents[2]
SURVIVORS = ROOT / "tests" / "mutation" / "survivors.toml"
# The modules that decide verdicts and figures, and the test files that cover each of them.
# Tests that start worker processes are left out: a worker imports the module unmutated.
# Measures worker children's RSS (37 s): a child imports the module unmutated, and mutmut would
# rerun it for every mutant of each function it reaches.
NO_CHILD_RSS = ("-k", "not cpu_peak_rss_matches_prediction")
AB_TESTS = (
    "tests/test_ab_command.py",
    "tests/test_ab_report.py",
    "tests/test_ab.py",
    "tests/test_ab_properties.py",
    "tests/test_serving_ab_rules.py",
    "tests/test_contention.py",
    "-k",
    "not (itself or planted or alternates or warm_up or time_budget or overlay or another_inter"
    " or cannot_install or worker_sharing or records_each_timed or load_on_arm_b or bisect_never)",
)
MODULES: dict[str, tuple[str, ...]] = {
    "bloomperf/analysis/compare.py": (
        "tests/test_compare.py",
        "tests/test_compare_rules.py",
        "tests/test_verdict_lines.py",
        "tests/test_verdict_properties.py",
        "tests/test_gate_properties.py",
        "tests/test_latency_verdicts.py",
    ),
    "bloomperf/analysis/verdicts.py": (
        "tests/test_compare.py",
        "tests/test_compare_rules.py",
        "tests/test_verdict_lines.py",
        "tests/test_verdict_properties.py",
        "tests/test_gate_properties.py",
        "tests/test_github_output.py",
        "tests/test_latency_verdicts.py",
    ),
    "bloomperf/analysis/stats.py": (
        "tests/test_stats.py",
        "tests/test_stats_properties.py",
        "tests/test_compare.py",
        "tests/test_verdict_properties.py",
        "tests/test_calibrate.py",
    ),
    "bloomperf/analysis/paired.py": (
        "tests/test_ab_properties.py",
        "tests/test_paired_rules.py",
        "tests/test_ab.py::test_critical_rank_matches_the_signed_rank_table",
        "tests/test_ab.py::test_interval_covers_the_true_ratio_at_its_level",
        "tests/test_ab.py::test_pairing_cancels_drift_and_outliers_do_not_move_the_estimate",
        "tests/test_ab.py::test_decide",
        "tests/test_ab.py::test_too_few_pairs_never_decide",
        "tests/test_ab.py::test_mismatched_or_bad_samples_are_refused",
    ),
    "bloomperf/analysis/contention.py": (
        "tests/test_contention.py",
        # In-process only: the probe on real busy loops and `ab`/`bisect` on the tiny model take
        # 420 s a mutmut run; the pair filter's own tests kill every mutant they killed.
        "-k",
        "not (worker_sharing or records_each_timed or load_on_arm_b or bisect_never)",
    ),
    # The measure layer in process: a worker or rank imports its module unmutated, so the
    # tests that start one (test_faults.py, test_protocol_observed.py, a CPU run's energy, the
    # contention probe on real busy loops) would only rerun for every mutant.
    "bloomperf/measure/contention.py": (
        "tests/test_load_probe.py",
        "tests/test_contention.py",
        "tests/test_contention_store.py",
        "-k",
        "not (worker_sharing or records_each_timed or load_on_arm_b or bisect_never)",
    ),
    "bloomperf/measure/memory.py": ("tests/test_memory.py", "tests/test_memory_properties.py"),
    "bloomperf/measure/nvml_sampler.py": (
        "tests/test_memory.py",
        "tests/test_nvml_live.py",
        "tests/test_nvml_sampler_rules.py",
    ),
    "bloomperf/measure/rank_peaks.py": ("tests/test_rank_peaks.py",),
    "bloomperf/measure/energy.py": ("tests/test_energy.py", "-k", "not cpu_run_on_this_host"),
    "bloomperf/store/latency.py": (
        "tests/test_latency.py",
        # Times the tiny model's real generate: under mutmut's trampolines the timing is off.
        "-k",
        "not through_the_real_generate",
        "tests/test_latency_verdicts.py",
        "tests/test_verdict_properties.py",
    ),
    "bloomperf/store/results/__init__.py": (
        "tests/test_verdict_properties.py",
        "tests/test_store_rules.py",
        "tests/test_compare.py",
        "tests/test_schema.py",
        "tests/test_tables.py",
    ),
    "bloomperf/store/results/codec.py": (
        "tests/test_schema.py",
        "tests/test_gate.py",
        "tests/test_store_rules.py",
        "tests/test_results_roundtrip.py",
        "tests/test_document_fields.py",
    ),
    # 29 test files reach it, most through the CLI in a process of their own: these read every
    # format in process (test_results_files.py states each rule).
    "bloomperf/store/results/files.py": (
        "tests/test_results_files.py",
        "tests/test_results_roundtrip.py",
        "tests/test_document_fields.py",
        "tests/test_diff.py",
        "tests/test_schema.py",
    ),
    "bloomperf/store/baseline/search.py": (
        "tests/test_baseline_search.py",
        "tests/test_baseline_folders.py",
        "tests/test_baseline.py",
        "tests/test_diff.py",
    ),
    "bloomperf/store/baseline/folders.py": (
        "tests/test_baseline_folders.py",
        "tests/test_baseline_search.py",
    ),
    "bloomperf/store/baseline/__init__.py": (
        "tests/test_baseline.py",
        "tests/test_compare.py",
        "tests/test_gate_properties.py",
    ),
    "bloomperf/store/baseline/codec.py": (
        "tests/test_baseline.py",
        "tests/test_schema.py",
        "tests/test_store_rules.py",
        "tests/test_baseline_roundtrip.py",
        "tests/test_document_fields.py",
    ),
    "bloomperf/store/baseline/accept.py": (
        "tests/test_baseline.py",
        "tests/test_accept_rules.py",
        "tests/test_verdict_properties.py",
    ),
    "bloomperf/analysis/boundaries.py": (
        "tests/test_baseline.py",
        "tests/test_boundary_rules.py",
        "tests/test_predict.py",
        "tests/test_tables.py",
        *NO_CHILD_RSS,
    ),
    "bloomperf/analysis/memory_model.py": (
        "tests/test_predict.py",
        "tests/test_memory_model_rules.py",
        "tests/test_memory_properties.py",
        *NO_CHILD_RSS,
    ),
    "bloomperf/store/history/__init__.py": (
        "tests/test_history.py",
        "tests/test_history_rules.py",
        "tests/test_history_properties.py",
    ),
    "bloomperf/store/history/nights.py": (
        "tests/test_history.py",
        "tests/test_nights_rules.py",
        "tests/test_history_properties.py",
        "tests/test_verdict_properties.py",
    ),
    # Not test_latency.py (real runs of the tiny model) nor test_report.py (the whole HTML
    # report and its plots): 15 s a mutant, past any budget; the tables' text is read here.
    "bloomperf/render/comparison.py": (
        "tests/test_comparison_text_rules.py",
        "tests/test_compare.py",
        "tests/test_serving_gate.py",
        "tests/test_tables.py",
        "tests/test_telemetry.py",
        "tests/test_terminal_output.py",
        "tests/test_verdict_properties.py",
    ),
    # Not test_serving_identity.py, which reads the serving venv's vLLM: mutmut's copy has none
    # and its run before any mutant fails, which leaves every mutant unchecked.
    "bloomperf/render/serving.py": (
        "tests/test_serving_table.py",
        "tests/test_serving_ab_rules.py",
        "tests/test_serving_analysis.py",
        "tests/test_serving_gate.py",
        "tests/test_serving_store.py",
    ),
    # Option plumbing (command line > environment > ini > default) and its parsers, by the
    # in-process tests: the CLI's and pytest's runs import the module unmutated.
    "bloomperf/harness/options.py": (
        "tests/test_config.py",
        "tests/test_gate_options.py",
        "tests/test_host_ram.py",
        "tests/test_plan.py",
        "tests/test_cli_arguments.py",
        "tests/test_option_rules.py",
    ),
    "bloomperf/harness/parsers.py": (
        "tests/test_option_rules.py",
        "tests/test_config.py",
        "tests/test_gate_options.py",
        "tests/test_host_ram.py",
        "tests/test_cli_arguments.py",
    ),
    # The metric registry (which way is better, each figure's unit and tolerance) and how
    # figures and untrusted text are written, by the in-process tests that read them back.
    "bloomperf/core/metrics.py": (
        "tests/test_metric_registry.py",
        "tests/test_accept_rules.py",
        "tests/test_compare_rules.py",
        "tests/test_gate_properties.py",
        "tests/test_nights_rules.py",
        "tests/test_serving_ab_rules.py",
        "tests/test_stats_properties.py",
        "tests/test_tables.py",
        "tests/test_verdict_properties.py",
    ),
    "bloomperf/core/formatting.py": (
        "tests/test_formatting_rules.py",
        "tests/test_security.py",
        "tests/test_backend_traits.py",
        "tests/test_github_rules.py",
        "tests/test_option_rules.py",
        "tests/test_run_table_rules.py",
        "tests/test_tables.py",
        "tests/test_terminal_rules.py",
        "tests/test_verdict_lines.py",
        "tests/test_verdict_properties.py",
    ),
    # Whether a cached model folder still holds what it was built from (before a run loads it).
    "bloomperf/catalog/manifest.py": (
        "tests/test_manifest_rules.py",
        "tests/test_cache_verify.py",
        "tests/test_models.py",
    ),
    # What the report's "What changed" section compares and says.
    "bloomperf/render/report/changes.py": (
        "tests/test_report_changes_rules.py",
        "tests/test_report_changes.py",
        "tests/test_history_properties.py",
    ),
    # The trend plots, read back from their figures' artists (the site's tests publish whole
    # sites: 25 s a mutant).
    "bloomperf/render/history/trend.py": ("tests/test_trend_figures.py",),
    "bloomperf/render/report/trend.py": ("tests/test_trend_figures.py",),
    "bloomperf/render/history/site.py": ("tests/test_site_pages.py",),
    # bisect's command with scripted steps, its search, steps and table; not the real bisect on
    # the tiny model (40 s) nor the contention probe on real busy loops.
    "bloomperf/cli/bisect.py": (
        "tests/test_bisect_command.py",
        "tests/test_bisect_rules.py",
        "tests/test_bisect.py",
        "tests/test_ab_properties.py",
        "tests/test_tables.py",
        "tests/test_contention.py",
        "-k",
        "not (finds_the_version or worker_sharing or records_each_timed or load_on_arm_b"
        " or bisect_never)",
    ),
    # ab's command, its table and results document: with the comparison scripted (no arm
    # installs, no real runs on the tiny model: test_ab.py's take 10 to 30 s each).
    "bloomperf/cli/ab.py": AB_TESTS,
    "bloomperf/cli/ab_report.py": AB_TESTS,
    # ab's loops with scripted cycles, and the pair log's rules; not test_ab.py's real runs on
    # the tiny model (10 to 20 s each) nor the contention probe on real busy loops.
    "bloomperf/harness/interleave.py": (
        "tests/test_interleave_loops.py",
        "tests/test_ab_properties.py",
        "tests/test_paired_rules.py",
        "tests/test_serving_ab_rules.py",
        "tests/test_contention.py",
        "-k",
        "not (worker_sharing or records_each_timed or load_on_arm_b or bisect_never)",
    ),
    # Multi-node shapes: hostfiles and --include/--exclude against DeepSpeed's own parser, a
    # rank's numbers from its launcher, the cells a run plans.
    "bloomperf/harness/hostfile.py": (
        "tests/test_multinode_launch.py",
        "tests/test_security.py",
        "tests/test_fuzz_readers.py",
        "tests/test_option_rules.py",
    ),
    "bloomperf/harness/rankenv.py": (
        "tests/test_multinode_launch.py",
        "tests/test_rank_peaks.py",
    ),
    "bloomperf/harness/matrix.py": (
        "tests/test_backend_traits.py",
        "tests/test_config.py",
        "tests/test_option_rules.py",
    ),
    # Whether a cell's model computes something before its timings count (the garbage check).
    "bloomperf/harness/output_check.py": ("tests/test_output_check.py",),
    # Where a run's results go, by the in-process tests: the CLI's and the plugin's runs import
    # the module unmutated.
    "bloomperf/harness/sinks.py": (
        "tests/test_sinks.py",
        "-k",
        "not plugin_tells and not run_tells and not failing_sink_loses",
    ),
    # The argv and environment a rank group starts with: DeepSpeed's own runner, its
    # --include of the group's GPUs, the CPU's rank count.
    # Every node's probe over a real sshd (test_multinode.py's two topology tests, in process;
    # not its rank groups, which run minutes each), and the probe's parts on their own.
    "bloomperf/harness/nodes.py": (
        "tests/test_nodes_rules.py",
        "tests/test_multinode_launch.py",
        "tests/test_cli_arguments.py",
        "tests/test_multinode.py",
        "-k",
        "not test_multinode.py or topology or answer",
    ),
    "bloomperf/harness/dslaunch.py": (
        "tests/test_ds_launch.py",
        "tests/test_multinode_launch.py",
        "tests/test_security.py",
    ),
    # The controller's and the worker's messages: framing, refusal of a malformed line, the
    # token a worker must present, the spec a worker reads.
    # (Not test_config.py: its mypy run reads mutmut's trampolines as unused ignores.)
    "bloomperf/harness/protocol.py": ("tests/test_protocol_rules.py", "tests/test_protocol.py"),
    # How every stored document is read and written: the input limit, strict JSON, the atomic
    # writer and its leftovers, the field readers (the CLI's own processes import it unmutated).
    "bloomperf/core/jsonfile.py": (
        "tests/test_jsonfile_rules.py",
        "tests/test_security.py",
        "tests/test_hostile_paths.py",
        "tests/test_schema.py",
        "tests/test_results_roundtrip.py",
        "tests/test_document_fields.py",
    ),
    # The serving sweep's load client: the requests file, one-token words, the client's argv,
    # its detailed result read back (test_serving.py runs it for real, in processes of its own).
    "bloomperf/harness/loadgen.py": (
        "tests/test_loadgen_rules.py",
        "tests/test_serving_ab_rules.py",
        "tests/test_security.py",
    ),
    # `bloomperf diff`: its in-process tests (the CLI's main on stored files). Not the files
    # that start workers or six writers for each mutant (test_verdict_paths.py and
    # test_concurrency.py run diff once among minutes of other work).
    "bloomperf/cli/diff.py": (
        "tests/test_diff_command.py",
        "tests/test_diff.py",
        "tests/test_gate.py",
        "tests/test_gate_properties.py",
        "tests/test_github_output.py",
        "tests/test_latency_verdicts.py",
        "tests/test_telemetry.py",
        "tests/test_cli_rules.py",
        "tests/test_provenance.py",
        "tests/test_schema.py",
    ),
    # Topologies, multi-node shapes and device ids.
    "bloomperf/catalog/topology.py": (
        "tests/test_topology_rules.py",
        "tests/test_topology.py",
        "tests/test_multinode_launch.py",
        "tests/test_host_ram.py",
        "tests/test_lock.py",
    ),
    # The torch dtypes a backend hands its library (a worker calls them in its own process).
    "bloomperf/catalog/dtypes.py": ("tests/test_catalog.py", "tests/test_backend_traits.py"),
    # Which failures are OOMs and which rank's report explains a group (in process: the runs
    # of test_faults.py classify in their workers, which import the module unmutated; vLLM's
    # refusals, in test_vllm_backend.py, need the serving venv the scratch copy lacks).
    "bloomperf/catalog/failures.py": (
        "tests/test_failure_rules.py",
        "tests/test_faults.py::test_allocation_failures_of_every_library_read_oom",
    ),
    # `baseline show|accept` through the CLI's main in this process (test_baseline_folders.py's
    # pip install and test_hostile_paths.py's subprocesses reach no mutant).
    "bloomperf/cli/baseline.py": (
        "tests/test_baseline_command.py",
        "tests/test_cli_arguments.py",
        "tests/test_baseline_folders.py",
        "tests/test_baseline_show_rules.py",
    ),
    # The report's environment rows, by value (the whole report's tests: 15 s a mutant).
    "bloomperf/render/report/environment.py": (
        "tests/test_environment_rows.py",
        "tests/test_report_changes_rules.py",
    ),
    # The blog workload's plots (memory, ms/token, load time), read back from their figures.
    "bloomperf/render/report/memory.py": ("tests/test_offline_plot_rules.py",),
    "bloomperf/render/report/timing.py": ("tests/test_offline_plot_rules.py",),
    # Every command's stdout and stderr, in process (test_hostile_paths.py's pipes and locales
    # are subprocesses, which import the module unmutated).
    "bloomperf/core/streams.py": ("tests/test_stream_rules.py",),
    # Progress lines by value, on a clock of the tests' own (test_progress.py's runs are
    # subprocesses).
    "bloomperf/core/progress.py": ("tests/test_progress_rules.py",),
    # `history add|changes|merge|publish` through the CLI's main in process (the concurrency
    # and fuzzing tests run it in subprocesses).
    "bloomperf/cli/history.py": (
        "tests/test_history_command.py",
        "tests/test_cli_rules.py",
        "tests/test_cli_arguments.py",
    ),
    # Which cache a run measures: its files' fingerprint, and what each result says it ran on.
    "bloomperf/catalog/fingerprint.py": (
        "tests/test_fingerprint_rules.py",
        "tests/test_provenance.py",
        "tests/test_topology.py",
        "tests/test_memory.py",
    ),
    "bloomperf/catalog/provenance.py": (
        "tests/test_provenance_rules.py",
        "tests/test_fingerprint_rules.py",
        "tests/test_provenance.py",
        "tests/test_report_changes_rules.py",
        "tests/test_serving_identity.py",
    ),
    # The GPUs' figures (memory, bandwidth, FLOP/s) the memory model and the roofline read.
    "bloomperf/catalog/hardware.py": (
        "tests/test_hardware_rules.py",
        "tests/test_topology_rules.py",
        "tests/test_accelerate_map.py",
        "tests/test_boundary_rules.py",
        "tests/test_memory_model_rules.py",
        "tests/test_memory_properties.py",
        "tests/test_roofline.py",
        "tests/test_utilisation.py",
    ),
    # Which GPUs a cell sees, by ordinal and by NVML index (the launcher's ranks on GPUs 4 to 7
    # import the module unmutated).
    "bloomperf/catalog/devices.py": (
        "tests/test_devices_rules.py",
        "tests/test_topology.py",
        "tests/test_topology_rules.py",
        "tests/test_memory.py",
        "tests/test_plan.py",
        "tests/test_record_nvml.py",
        "tests/test_ds_launch.py",
        "-k",
        "not really_starts_the_ranks",
    ),
    # accelerate's device maps: the budget per GPU, and the memory model's split beside them.
    "bloomperf/catalog/device_map.py": (
        "tests/test_accelerate_map.py",
        "tests/test_catalog.py",
        "tests/test_device_map_rules.py",
        "tests/test_memory_properties.py",
    ),
    "bloomperf/catalog/accelerate_map.py": (
        "tests/test_accelerate_map.py",
        "tests/test_memory_properties.py",
        "tests/test_plan.py",
    ),
    # History's change detection (moved here from store/history), and its gate.
    "bloomperf/analysis/changes.py": (
        "tests/test_history_rules.py",
        "tests/test_history_properties.py",
        "tests/test_history.py",
        "tests/test_gate_properties.py",
        "tests/test_metric_registry.py",
    ),
    # A served sweep's figures: effective throughput, the SLA, the rate that met it.
    "bloomperf/analysis/serving.py": (
        "tests/test_serving_analysis.py",
        "tests/test_serving_gate.py",
    ),
    # The GitHub annotations and outputs, and the terminal's verdict lines, by value (the
    # terminal's and the sinks' subprocess runs import the modules unmutated).
    "bloomperf/render/github.py": ("tests/test_github_rules.py",),
    "bloomperf/render/terminal.py": ("tests/test_terminal_rules.py",),
    "bloomperf/store/history/merge.py": ("tests/test_history_merge.py",),
    # The waits on a clock of the tests' own (test_wait_for_is_precise judges the machine's
    # real overshoot, which mutmut's own load on the CPUs breaks before any mutant).
    "bloomperf/measure/slowdown.py": ("tests/test_slowdown.py", "-k", "not wait_for_is_precise"),
    # Outputs replaced whole, stores written one writer at a time, and where the locks live
    # (test_concurrency.py's and test_killed_runs.py's writers are subprocesses).
    "bloomperf/core/swapdir.py": ("tests/test_swapdir_rules.py",),
    "bloomperf/core/storelock.py": ("tests/test_store_lock_rules.py",),
    "bloomperf/core/lockdir.py": ("tests/test_store_lock_rules.py",),
    # A worker group's caches and DeepSpeed's op builds under bloomperf's lock (the stale-lock
    # runs of test_process_tree.py and test_doctor.py are subprocesses).
    "bloomperf/catalog/caches.py": ("tests/test_build_lock_rules.py",),
}
# Every layer that decides a verdict, a figure or what gets written: ``--layer NAME`` mutates
# each of its modules (those above keep their hand-picked tests; any other gets the test files
# that import it, ``covering_tests``). Their survivor lists are to be measured.
# core: the metric registry (which way each figure is better) and how figures are written.
LAYERS = ("analysis", "store", "render", "harness", "cli", "measure", "catalog", "core", "plugin")


def layer_modules(layer: str) -> list[str]:
    """The package's modules in ``layer`` (``plugin`` is the one module of that name)."""
    package = ROOT / "bloomperf"
    if layer == "plugin":
        return ["bloomperf/plugin.py"]
    return sorted(str(p.relative_to(ROOT)) for p in (package / layer).rglob("*.py"))


# Files that start a real vLLM server (30-90 s before the first request) or run vLLM's engine:
# rerun for every mutant they would take hours, and the weekly runner has no serving venv.
# Their modules' figures are checked by the files beside them (test_serving_gate.py, ...).
SERVER_TESTS = ("tests/test_serving.py", "tests/test_serving_ab.py", "tests/test_vllm_backend.py")


def covering_tests(module: str) -> tuple[str, ...]:
    """``MODULES``'s tests, else the test files that reach the module by name (``named_by``),
    else those of the nearest modules that import it: a module no test names (a plot the report
    draws, an option type its commands parse) is reached through them."""
    if module in MODULES:
        return MODULES[module]
    frontier, seen = [module], {module}
    while frontier:
        found = sorted({test for each in frontier for test in named_by(each)})
        if found:
            return (*found, *NO_CHILD_RSS) if "tests/test_predict.py" in found else tuple(found)
        frontier = [m for each in frontier for m in importers(each) if m not in seen]
        seen.update(frontier)
    return ()


def dotted_name(module: str) -> str:
    return module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def named_by(module: str) -> tuple[str, ...]:
    """The test files that import the module by its dotted name, run its command through the
    CLI's main (a ``cli`` module), or carry its name (``site.py``: ``test_history_site.py``),
    but not ``SERVER_TESTS``."""
    dotted = dotted_name(module)
    parent, _, name = dotted.rpartition(".")
    spellings = (f"from {dotted} import", f"import {dotted}", f"from {parent} import {name}")
    if parent == "bloomperf.cli":
        # A command is run in process through the CLI's main as often as by its module's name
        # (``cli.main(["diff", ...])``): those tests reach it too.
        spellings += (f'main(["{name}"',)
    return tuple(
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if str(path.relative_to(ROOT)) not in SERVER_TESTS
        and (
            any(spelling in path.read_text(encoding="utf-8") for spelling in spellings)
            or (name != "__init__" and name in path.stem.split("_"))
        )
    )


def importers(module: str) -> list[str]:
    """The package's modules that import ``module``, or a name from it."""
    dotted = dotted_name(module)
    found = []
    for path in sorted((ROOT / "bloomperf").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            else:
                continue
            if dotted in names:
                found.append(str(path.relative_to(ROOT)))
                break
    return found


# Modules that run only in a process of their own: mutmut switches mutants on in the process
# that runs the tests, so no test reaches these mutants, and a layer's run names them instead
# of failing on "no test file imports it" (tests/test_mutmut_verdict.py holds the list to the
# modules no test covers).
OWN_PROCESS = {
    "bloomperf/harness/rankentry/run_module.py": "a rank's entry point, run by the launcher",
    "bloomperf/harness/serve_keeper.py": "the vLLM server's keeper, a process of its own",
    "bloomperf/harness/vllm_client.py": "vLLM's client, run by the serving venv's Python",
}


# Tests that fail in mutmut's copy whatever the mutant, and are left out of every module's run:
# mutmut's first pass over the tests (before any mutant) would fail and leave all unchecked.
DESELECT = (
    # pip-installs the tree it runs in: in mutmut's copy that is a tree of trampolines, which
    # run only under mutmut's own process (the install's CLI exits 2).
    "tests/test_baseline_folders.py::test_a_non_editable_install_finds_the_shipped_baselines",
    # Reads vLLM's build in the serving venv: the weekly runner has none, nor has the copy.
    "tests/test_serving_identity.py::test_the_serving_venvs_vllm_build_and_version_are_read",
    # Reads the commit of the checkout it runs in: mutmut's copy is no git repository.
    "tests/test_provenance.py::test_a_results_file_carries_commit_command_and_packages",
)

# Besides bloomperf/ and tests/ (mutmut copies those), what the tests read. Not baselines/, a
# link to the package's: mutmut would copy it as a folder of its own (a checkout's baselines
# would then differ from the shipped ones); ``prepare`` links it in mutmut's copy instead.
ALSO_COPY = ("conftest.py", "benchmarks", "README.md", "docs", "requirements", ".ci")


# The canaries' hypothesis profile (tests/conftest.py): the same derandomised examples, and no
# shrinking of a failure, which asks only whether the mutant fails: shrinking a failing
# property under mutmut's trampolines ran past the timeout and left the mutant "timeout".
PYTEST_ARGS = ("-p", "no:cacheprovider", "-q", "--hypothesis-profile", "canary")


def config(module: str, tests: tuple[str, ...]) -> str:
    """The ``[tool.mutmut]`` section for one module (TOML)."""
    deselected = [f"--deselect={test}" for test in DESELECT]
    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["bloomperf"]',
            f"only_mutate = [{json.dumps(module)}]",
            f"also_copy = {json.dumps(list(ALSO_COPY))}",
            f"pytest_add_cli_args_test_selection = {json.dumps(list(tests))}",
            f"pytest_add_cli_args = {json.dumps([*PYTEST_ARGS, *deselected])}",
            "",
        ]
    )


def copy_tree(scratch: Path) -> None:
    """The files git tracks or would track, as they are in the working tree, into ``scratch``."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source, target = ROOT / name, scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # baselines -> bloomperf/baselines
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)


def prepare(scratch: Path, module: str, tests: tuple[str, ...]) -> None:
    """The tracked tree in ``scratch``, with this module's mutmut section in its pyproject."""
    copy_tree(scratch)
    (scratch / "mutants").mkdir()
    (scratch / "mutants" / "baselines").symlink_to(os.readlink(scratch / "baselines"))
    pyproject = scratch / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + config(module, tests))


def results(scratch: Path) -> dict[str, str]:
    """mutant name -> status, every line of ``mutmut results --all true`` (``    NAME: STATUS``),
    whatever the status: one mutmut adds later is counted too, as a mutant left alive."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    found = {}
    for line in done.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name and " " not in name:
            found[name] = status
    return found


def run_mutmut(folder: Path, children: int, budget: float) -> str:
    """``mutmut run`` in ``folder``; what went wrong, or "". On the budget the whole process
    group goes: mutmut's forked children would otherwise go on testing mutants."""
    # CI: the derandomised hypothesis profile (tests/conftest.py), so that a mutant's fate does
    # not depend on the day's examples, and no skip passes silently (tests/skips.py).
    # One OpenMP thread: mutmut forks each mutant's tests from a process that already ran
    # torch, and GNU OpenMP's pool does not survive a fork (a child's first parallel op, e.g.
    # building a model, waits on threads that are not there).
    env = dict(
        os.environ, BLOOMPERF_CACHE=str(ROOT / ".bloomperf-cache"), CI="true", OMP_NUM_THREADS="1"
    )
    env.pop("PYTHONPATH", None)
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    with subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return f"over the budget of {budget:g} s: fails the run (raise --budget)"
    if process.returncode != 0:
        return "mutmut failed:\n" + "\n".join(output.strip().splitlines()[-8:])
    return ""


def has_code(module: str) -> bool:
    """Whether the module holds more than its docstring (a package's ``__init__`` may not):
    mutmut writes no mutant there, and its tests need not run for nothing."""
    body = ast.parse((ROOT / module).read_text(encoding="utf-8")).body
    return any(
        not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body
    )


def run_module(module: str, budget: float, children: int, keep: Path | None) -> Tally:
    if not has_code(module):
        return Tally(module, {}, 0.0)
    start = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="mutmut-"))
    try:
        tests = covering_tests(module)
        if not tests:
            return Tally(module, {}, 0.0, "no test file imports it")
        prepare(folder, module, tests)
        problem = run_mutmut(folder, children, budget)
        return Tally(module, results(folder), time.monotonic() - start, problem)
    finally:
        if keep is not None:
            target = keep / module.replace("/", "_")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(folder, target, symlinks=True)
        shutil.rmtree(folder, ignore_errors=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all listed)")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once")
    parser.add_argument("--budget", type=float, default=3600, help="seconds per module")
    parser.add_argument(
        "--max-survivors",
        type=int,
        default=0,
        help="mutants left alive allowed in modules with no survivor list (default 0)",
    )
    parser.add_argument(
        "--survivors", type=Path, default=SURVIVORS, help="the committed survivor list (TOML)"
    )
    parser.add_argument("--keep", type=Path, help="keep each module's scratch copy here")
    parser.add_argument(
        "--layer", choices=LAYERS, action="append", default=[], help="every module of a layer"
    )
    parser.add_argument("--shard", help="K/N: only the K-th of N shares of the modules chosen")
    args = parser.parse_args(argv)
    known = {m for layer in LAYERS for m in layer_modules(layer)} | set(MODULES)
    unknown = [m for m in args.modules if m not in known]
    if unknown:
        parser.error(f"unknown module {unknown[0]!r} (known: {', '.join(sorted(known))})")
    chosen = [*args.modules, *(m for layer in args.layer for m in layer_modules(layer))]
    args.chosen = chosen or list(MODULES)
    if args.shard is not None:
        try:
            k, n = parse_shard(args.shard)
        except ValueError as exc:
            parser.error(str(exc))
        sizes = {m: len((ROOT / m).read_text(encoding="utf-8").splitlines()) for m in args.chosen}
        args.chosen = shard(args.chosen, sizes, k, n)
    return args


def report(tally: Tally) -> None:
    print(tally.line(), flush=True)
    for name, status in tally.left.items():
        print(f"  {status}: {name}", flush=True)
    if tally.problem:
        print("  " + tally.problem.replace("\n", "\n  "), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    listed = load_survivors(args.survivors)
    tallies = []
    for module in args.chosen:
        if module in OWN_PROCESS:
            print(f"{module}: not mutated: {OWN_PROCESS[module]}", flush=True)
            continue
        tally = run_module(module, args.budget, args.max_children, args.keep)
        tallies.append(tally)
        report(tally)
    total = sum(t.mutants for t in tallies)
    killed = sum(t.killed for t in tallies)
    left = total - killed
    print(f"mutation: {total} mutants, {killed} killed, {left} left alive (any other status)")
    if "GITHUB_OUTPUT" in os.environ:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"mutants={total}\nkilled={killed}\nsurvived={left}\n")
    verdict = judge(tallies, listed, args.max_survivors)
    for line in verdict.lines:
        print(f"mutation: {line}", flush=True)
    broken = [t for t in tallies if t.problem]  # mutmut failed, or a module ran over budget
    return 1 if verdict.failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
