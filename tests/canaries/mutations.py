"""Mutation canaries: deliberate one-line bugs of the real code, and the tests that must catch them.

Each entry names the file, an exact snippet of it (it must occur exactly once), its replacement,
the test node ids that must fail against the mutant, and why the bug matters. ``run.py`` applies
them one at a time in a scratch copy. When the code moves, move the snippet with it; when a
mutant survives, the named tests prove less than they say: fix the tests, not the canary.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    why: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "reused-group-id-signalled",
        "bloomperf/harness/teardown.py",
        "    return process.returncode is None or not psutil.pid_exists(process.pid)\n",
        "    return True\n",
        ("tests/test_teardown.py::test_a_reaped_groups_id_held_by_another_process_is_left_alone",),
        "stopping a group twice, or late, SIGTERMs/SIGKILLs whatever group got its id since",
    ),
    # ---- after mutmut's full run: planted by hand where mutmut cannot reach ---------
    Mutation(
        "peak-reset-before-the-output-check",
        "bloomperf/harness/worker.py",
        '        check_logits(self.backend.next_token_logits(self.inputs["input_ids"], mask), '
        "mask)\n"
        "        self.tokens_checked = False\n",
        "        reset_own_peak()\n"
        '        check_logits(self.backend.next_token_logits(self.inputs["input_ids"], mask), '
        "mask)\n"
        "        self.tokens_checked = False\n",
        ("tests/test_protocol_observed.py::test_the_cell_is_prepared_outside_any_cycle",),
        "the cell's peak counts the output check's forward pass (the peaks reset before it)",
    ),
    Mutation(
        "load-time-includes-prepare",
        "bloomperf/harness/worker.py",
        "        self.backend.prepare(self.request)\n        self.backend.synchronize()\n"
        "        start = time.perf_counter()\n",
        "        start = time.perf_counter()\n        self.backend.prepare(self.request)\n"
        "        self.backend.synchronize()\n",
        (
            "tests/test_protocol_observed.py::"
            "test_the_load_time_covers_the_backends_load_and_nothing_else",
        ),
        "load time counts the backend's imports and preparation, not the load alone",
    ),
    Mutation(
        "bisect-step-told-by-any-cell",
        "bloomperf/cli/bisect.py",
        "            (c for c in judged if c.verdict == SLOWER),",
        "            (c for c in judged),",
        (
            "tests/test_ab_properties.py::"
            "test_a_slower_step_is_told_by_its_slower_cell_not_a_wilder_inconclusive_one",
        ),
        "a slower bisect step reports an inconclusive cell's ratio and name",
    ),
    Mutation(
        "merged-night-dated-by-its-start",
        "bloomperf/store/history/merge.py",
        '    day = date.fromisoformat(match["date"]) if match else night_date(run, str(path))',
        "    day = night_date(run, str(path))",
        (
            "tests/test_history_merge.py::"
            "test_a_history_night_keeps_its_date_and_counts_are_what_the_merge_did",
        ),
        "a night added with --date moves to its run's start date when histories are merged",
    ),
    # ---- one mutant per class of property (the classes nobody had listed) ----------
    Mutation(
        "improvement-outranks-regression",
        "bloomperf/analysis/compare.py",
        "    if REGRESSED in statuses:\n        return REGRESSED\n    if IMPROVED in statuses:\n"
        "        return IMPROVED",
        "    if IMPROVED in statuses:\n        return IMPROVED\n    if REGRESSED in statuses:\n"
        "        return REGRESSED",
        (
            "tests/test_verdict_properties.py::test_regressing_any_one_metric_fails_the_cell_whatever_the_others_do",
            "tests/test_verdict_properties.py::test_a_regression_outranks_any_number_of_improvements",
        ),
        "ms/token 20 % faster and peak memory doubled reads 'improved' and passes the gate",
    ),
    Mutation(
        "plugin-ignores-incomparable",
        "bloomperf/analysis/compare.py",
        "return compare_in(incomparable_reason(run, baseline), cell, baseline, strict=strict)",
        "return compare_in(None, cell, baseline, strict=strict)",
        (
            "tests/test_gate_properties.py::test_judge_and_the_plugins_per_cell_judgement_follow_the_rule",
            "tests/test_verdict_paths.py::test_an_incomparable_workload_is_judged_by_no_path",
        ),
        "the pytest plugin judges a cell against another GPU's baseline that diff refuses",
    ),
    Mutation(
        "warm-up-skipped",
        "bloomperf/harness/runner.py",
        "    for _ in range(warmup):\n        one_cycle()\n"
        "    return [one_cycle() for _ in range(cycles)]",
        "    return [one_cycle() for _ in range(cycles)]",
        (
            "tests/test_protocol_observed.py::"
            "test_warm_up_cycles_come_first_and_only_measured_cycles_are_returned",
        ),
        "the first, cold cycle (allocator warm-up, kernel selection) is timed as a measured one",
    ),
    Mutation(
        "retokenised-in-the-timed-region",
        "bloomperf/harness/worker.py",
        "        start = timer.start()\n        output = self.backend.generate(",
        "        start = timer.start()\n"
        "        from bloomperf.catalog.workload import build_inputs\n\n"
        '        rows = int(self.inputs["input_ids"].shape[0])\n'
        "        self.inputs = build_inputs(self.tokenizer, rows, self.backend.input_device)\n"
        "        output = self.backend.generate(",
        (
            "tests/test_protocol_observed.py::test_the_cell_is_prepared_outside_any_cycle",
            "tests/test_protocol_observed.py::test_the_same_protocol_under_the_real_accelerate_backend",
        ),
        "tokenisation and input copies are timed as generation: ms/token grows with the CPU",
    ),
    Mutation(
        "load-peak-dropped",
        "bloomperf/store/results/__init__.py",
        "        return max(peaks) if peaks else None",
        "        return peaks[-1] if peaks else None",
        (
            "tests/test_verdict_properties.py::test_a_cells_peak_is_the_larger_of_its_load_and_generate_peaks",
            "tests/test_verdict_properties.py::test_a_load_peak_above_the_generation_peak_is_judged",
        ),
        "a load that grows past the generation peak (a new loader keeping a copy) is never seen",
    ),
    Mutation(
        "figure-is-a-mean",
        "bloomperf/store/results/__init__.py",
        "        return statistics.median(self.samples_ms_per_token)",
        "        return statistics.fmean(self.samples_ms_per_token)",
        (
            "tests/test_verdict_properties.py::test_one_outlier_cycle_moves_no_reported_figure_beyond_the_other_cycles",
        ),
        "one disturbed cycle moves the table, the accepted baseline and the history night",
    ),
    Mutation(
        "ab-passes-an-oom",
        "bloomperf/cli/ab.py",
        "FAILED_OUTCOMES = (Outcome.ERROR, Outcome.TIMEOUT, Outcome.OOM)",
        "FAILED_OUTCOMES = (Outcome.ERROR, Outcome.TIMEOUT)",
        ("tests/test_ab_properties.py::test_ab_fails_when_either_arm_did_not_run",),
        "an upgrade that runs out of memory in arm B passes `bloomperf ab`",
    ),
    Mutation(
        "bisect-needs-every-cell-slower",
        "bloomperf/cli/bisect.py",
        "    if SLOWER in verdicts:",
        "    if verdicts == {SLOWER}:",
        ("tests/test_ab_properties.py::test_a_bisect_step_is_slower_when_any_cell_is_slower",),
        "a version that slowed one batch size is called good and the bisect names the wrong one",
    ),
    Mutation(
        "error-passes-without-baseline",
        "bloomperf/analysis/verdicts.py",
        "        if self.status in (ERROR, TIMEOUT):",
        "        if self.status in (ERROR, TIMEOUT) and self.expected_outcome is not None:",
        (
            "tests/test_gate_properties.py::test_judge_and_the_plugins_per_cell_judgement_follow_the_rule",
        ),
        "before a baseline is accepted, a crashing cell passes `run` and the nightly gate",
    ),
    Mutation(
        "github-output-ignores-history",
        "bloomperf/cli/diff.py",
        "write_job_outputs(job_outputs(comparison, failed))",
        "write_job_outputs(job_outputs(comparison, comparison.failed))",
        (
            "tests/test_gate_properties.py::test_the_github_output_never_says_pass_when_the_history_fails_the_step",
        ),
        "the job's verdict output says pass while the step fails on the history's new change",
    ),
    Mutation(
        "step-dated-late",
        "bloomperf/analysis/changes.py",
        "range(lo + 1, hi)",
        "range(k, hi)",
        (
            "tests/test_history_properties.py::test_a_step_at_any_detectable_night_is_found_at_that_night",
        ),
        "a step at the first detectable night is blamed on the next night's software change",
    ),
    Mutation(
        "previous-night-is-the-oldest",
        "bloomperf/render/report/changes.py",
        "        return nights[mine[0] - 1] if mine[0] > 0 else None",
        "        return nights[0] if mine[0] > 0 else None",
        (
            "tests/test_history_properties.py::"
            "test_the_report_compares_with_the_previous_night_not_another",
        ),
        "the report's 'since the previous night' lists every change since the oldest night",
    ),
    Mutation(
        "cleanup-shm-no-op",
        "bloomperf/harness/shm.py",
        "            os.unlink(path)\n            removed.append(path)",
        "            removed.append(path)",
        ("tests/test_ds_launch.py::test_cleanup_shm_removes_only_unused_new_segments",),
        "every DeepSpeed rank leaves a 66 MiB /dev/shm segment; /dev/shm fills up over a night",
    ),
    Mutation(
        "oom-classified-as-error",
        "bloomperf/catalog/failures.py",
        "any(oom in text for oom in OOM_TEXTS)",
        "all(oom in text for oom in OOM_TEXTS)",
        ("tests/test_faults.py::test_allocation_failures_of_every_library_read_oom",),
        "a DeepSpeed/NCCL/cuBLAS OOM read as an error fails the gate instead of marking a boundary",
    ),
    Mutation(
        "store-writers-not-serialised",
        "bloomperf/core/storelock.py",
        "        flock_within(fd, folder, wait_s)\n",
        "",
        (  # the held-lock tests, not the six-writer races: a race may miss the mutant once
            "tests/test_concurrency.py::"
            "test_a_store_writer_waits_while_another_holds_the_folder_lock[accept]",
            "tests/test_concurrency.py::"
            "test_a_store_writer_waits_while_another_holds_the_folder_lock[add]",
            "tests/test_concurrency.py::"
            "test_a_store_writer_waits_while_another_holds_the_folder_lock[merge]",
        ),
        "parallel CI jobs accepting into one baselines folder, or runners merging into one "
        "history, silently drop each other's cells and nights",
    ),
    Mutation(
        "results-file-shared-by-two-runs",
        "bloomperf/cli/run.py",
        "        hold_output_lock(output),  # --no-lock too: one writer per results file\n",
        "",
        (
            "tests/test_concurrency.py::"
            "test_two_runs_writing_one_results_file_the_second_is_refused",
        ),
        "two --no-lock runs with one --output: the second rewrites the file without the "
        "first's cells",
    ),
    Mutation(
        "output-may-be-an-input",
        "bloomperf/cli/run.py",
        '    refuse_overwriting_inputs([output], input_files(vars(args)), "--output")\n',
        "",
        (
            "tests/test_concurrency.py::"
            "test_run_refuses_an_output_that_is_one_of_its_inputs[--ds-config]",
            "tests/test_concurrency.py::"
            "test_run_refuses_an_output_that_is_one_of_its_inputs[--hostfile]",
        ),
        "run --output over its own --ds-config or hostfile destroys what it was started with",
    ),
    Mutation(
        "device-lock-folder-under-tmpdir",
        "bloomperf/core/lockdir.py",
        "    for base in SHARED_BASES:\n",
        '    for base in (Path(os.environ.get("TMPDIR", "/tmp")),):\n',
        (
            "tests/test_security.py::"
            "test_locks_live_in_one_machine_wide_folder_and_never_through_a_link",
        ),
        "two runs with different TMPDIRs each take their own lock and measure on one GPU",
    ),
    Mutation(
        "sigterm-waits-for-a-busy-worker",
        "bloomperf/harness/launch.py",
        "        self.kill(grace_s=ABORT_GRACE_S)\n",
        "        try:\n"
        "            self.process.wait(timeout=30)  # type: ignore[union-attr]\n"
        "        except subprocess.TimeoutExpired:\n"
        "            pass\n"
        "        self.kill()\n",
        (
            "tests/test_process_tree.py::test_sigterm_kills_a_busy_worker_within_seconds_and_keeps_the_cells",
        ),
        "a CI cancel or timeout -k SIGKILLs the controller while it waits 30 s: orphaned group",
    ),
    Mutation(
        "hang-up-not-handled",
        "bloomperf/core/interrupt.py",
        "STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)",
        "STOP_SIGNALS = (signal.SIGTERM,)",
        (
            "tests/test_process_tree.py::test_a_hang_up_or_quit_stops_the_run_as_ctrl_c_does[SIGHUP]",
            "tests/test_process_tree.py::test_a_hang_up_or_quit_stops_the_run_as_ctrl_c_does[SIGQUIT]",
        ),
        "a closed SSH session kills the controller silently, leaving its workers and temp folders",
    ),
    Mutation(
        "survivors-of-a-killed-run-ignored",
        "bloomperf/harness/lock.py",
        "        refuse_survivors(key)\n",
        "",
        (
            "tests/test_process_tree.py::test_the_device_lock_is_not_free_while_a_killed_runs_group_survives",
        ),
        "the next run measures beside a dying orphan that still holds the device",
    ),
    Mutation(
        "stale-build-lock-kept",
        "bloomperf/catalog/caches.py",
        "        for baton in stale_batons(folder):\n",
        "        for baton in []:\n",
        (
            "tests/test_process_tree.py::test_the_build_lock_removes_only_batons_nobody_can_be_holding",
        ),
        "one killed JIT build makes every later DeepSpeed group on the machine hang to its timeout",
    ),
    Mutation(
        "worker-folder-left-in-tmpdir",
        "bloomperf/harness/launch.py",
        "        remove_folder(self._workdir, keep=self.log_path if self.failed else None)",
        "        pass",
        (
            "tests/test_process_tree.py::test_a_clean_run_leaves_nothing_in_tmpdir_and_a_failed_one_only_its_log",
        ),
        "every failed or killed cell leaves a bloomperf-worker-* folder nobody names",
    ),
    Mutation(
        "close-waits-for-a-busy-worker",
        "bloomperf/harness/launch.py",
        "        if self.awaiting:  # an exception",
        "        if False:  # an exception",
        (
            "tests/test_process_tree.py::"
            "test_stopping_a_runner_whose_request_an_interrupt_left_unanswered_does_not_wait",
        ),
        "ab, calibrate or the plugin stopping a runner while a signal unwinds waits 30 s for it",
    ),
    Mutation(
        "no-parent-death-signal",
        "bloomperf/harness/orphans.py",
        "        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)",
        "        pass",
        (
            "tests/test_process_tree.py::"
            "test_a_child_started_with_the_parent_death_signal_dies_with_its_sigkilled_parent",
        ),
        "a SIGKILLed controller's worker goes on computing beside the next run",
    ),
    Mutation(
        "sampler-returns-zero",
        "bloomperf/measure/rss_sampler.py",
        'MemoryReading(source="rss", peak_bytes=peak, reason=self.reason)',
        'MemoryReading(source="rss", peak_bytes=0, reason=self.reason)',
        ("tests/test_memory.py::test_rss_peak_is_seen_after_free_and_reset_at_each_mark",),
        "a memory regression would pass unseen",
    ),
    Mutation(
        "verdict-tolerance-ignored",
        "bloomperf/analysis/stats.py",
        "estimate.low > 1.0 + min_effect and estimate.ratio > 1.0 + tolerance",
        "estimate.low > 1.0 + min_effect and estimate.ratio > 1.0",
        (
            "tests/test_stats.py::test_real_but_tiny_change_within_tolerance_is_same",
            "tests/test_compare.py::test_within_tolerance_is_same",
        ),
        "every tiny real change (a new driver) would fail the gate: the suite cries wolf",
    ),
    Mutation(
        "lock-skipped",
        "bloomperf/harness/lock.py",
        "    if not enabled:\n        yield",
        "    if True:\n        yield",
        ("tests/test_lock.py::test_second_run_refuses_with_the_first_runs_pid",),
        "two runs on the same GPUs time each other's work",
    ),
    Mutation(
        "write-not-atomic",
        "bloomperf/core/jsonfile.py",
        'fd, tmp = tempfile.mkstemp(prefix=temp_prefix(folder, path.name), suffix=".tmp", '
        "dir=folder)",
        "fd, tmp = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), str(path)",
        (
            "tests/test_faults.py::test_full_disk_leaves_the_old_results_file_whole",
            "tests/test_diff.py::test_a_failed_write_never_leaves_half_a_baseline",
        ),
        "a full disk or a crash mid-write leaves half a results file or baseline",
    ),
    Mutation(
        "accelerate-quantizer-factor-dropped",
        "bloomperf/catalog/accelerate_map.py",
        'QUANTIZER_MAX_MEMORY_FACTOR = {"int8": 0.90}',
        'QUANTIZER_MAX_MEMORY_FACTOR = {"int8": 1.0}',
        ("tests/test_accelerate_map.py::test_the_compensation_is_the_quantizers_own_factor",),
        "the int8 map would overflow to the CPU/disk on the machine: a 100x slower run",
    ),
    Mutation(
        "include-devices-dropped",
        "bloomperf/harness/dslaunch.py",
        'include = ["--include", include_argument(gpus)]',
        "include: list[str] = []",
        ("tests/test_ds_launch.py::test_ranks_get_the_users_gpus_through_deepspeeds_runner",),
        "DeepSpeed's runner would put the ranks on GPUs 0..N-1, not on the GPUs sampled and locked",
    ),
    Mutation(
        "gate-passes-incomplete-runs",
        "bloomperf/analysis/compare.py",
        'incomplete="" if allow_incomplete else incompleteness(run) or "",',
        'incomplete="",',
        ("tests/test_gate.py::test_an_incomplete_or_empty_run_fails_the_gate",),
        "a run that crashed after one cell (or measured nothing) would pass CI",
    ),
    Mutation(
        "regression-exits-zero",
        "bloomperf/cli/diff.py",
        "    return EXIT_REGRESSION if failed else 0",
        "    return 0",
        ("tests/test_diff.py::test_two_results_diff_before_and_after",),
        "bloomperf diff in a CI script would never fail the job on a slowdown",
    ),
    Mutation(
        "results-not-saved-per-cell",
        "bloomperf/harness/session.py",
        "        if self.output is not None:\n"
        "            ResultsFile(self.output).cell_recorded(cell, self.run)\n",
        "",
        (
            "tests/test_faults.py::test_second_run_refuses_with_the_first_pid_then_ctrl_c_keeps_finished_cells",
        ),
        "a crash or Ctrl-C after hours of cells loses every measurement",
    ),
    Mutation(
        "parameter-formula-wrong",
        "bloomperf/catalog/models.py",
        "return 13 * hidden",
        "return 12 * hidden",
        ("tests/test_models.py::test_parameter_count_matches_transformers",),
        "memory predictions, skip decisions and int8 maps all rest on the parameter count",
    ),
    Mutation(
        "ms-per-token-ignores-batch",
        "bloomperf/catalog/workload.py",
        "return seconds * 1000.0 / (batch_size * new_tokens)",
        "return seconds * 1000.0 / new_tokens",
        (
            "tests/test_workload.py::test_ms_per_token_divides_by_every_token_of_the_batch",
            "tests/test_run.py::test_the_plugin_runs_the_matrix_with_pytest_benchmark",
        ),
        "every batched figure would be off by the batch size against the blog's metric",
    ),
    Mutation(
        "one-row-inputs",
        "bloomperf/catalog/workload.py",
        "tokenizer(prompts_for_batch(batch_size), return_tensors",
        "tokenizer(prompts_for_batch(1), return_tensors",
        ("tests/test_workload.py::test_the_batch_is_in_the_inputs",),
        "every batch size would time batch 1 while ms/token divides by the batch: fake speed-ups",
    ),
    Mutation(
        "min-new-tokens-not-forced",
        "bloomperf/catalog/workload.py",
        '        "min_new_tokens": new_tokens,\n',
        "",
        ("tests/test_workload.py::test_exactly_n_tokens_even_when_the_model_meets_eos_at_once",),
        "a model meeting EOS early generates fewer tokens than ms/token counts",
    ),
    Mutation(
        "output-length-check-disabled",
        "bloomperf/harness/worker.py",
        "        if produced != self.new_tokens:",
        "        if False:",
        ("tests/test_workload.py::test_an_output_short_of_n_tokens_fails_the_cycle",),
        "a backend generating fewer tokens than asked would look faster, unnoticed",
    ),
    Mutation(
        "tp-forced-to-1",
        "bloomperf/backends/ds_inference.py",
        'tensor_parallel={"tp_size": request.world_size}',
        'tensor_parallel={"tp_size": 1}',
        ("tests/test_tp_shards.py::test_each_tp_rank_holds_its_share_of_query_key_value",),
        "every rank would hold the whole model: the TP rows of the table would measure TP=1",
    ),
    Mutation(
        "no-lock-ignored",
        "bloomperf/harness/lock.py",
        "    if not enabled:\n        yield",
        "    if False:\n        yield",
        ("tests/test_lock.py::test_no_lock_runs_anyway",),
        "--no-lock (for a machine whose GPUs another tool manages) would refuse to run",
    ),
    Mutation(
        "synchronize-after-generate-removed",
        "bloomperf/harness/worker.py",
        "timer.criteria()},\n        )\n        self.backend.synchronize()\n",
        "timer.criteria()},\n        )\n",
        ("tests/test_workload.py::test_the_timed_region_lies_between_two_synchronisations",),
        "on a GPU the timer would stop before queued kernels finish: ms/token far too low",
    ),
    Mutation(
        "step-mark-unsynchronised",
        "bloomperf/measure/steptimer.py",
        "        self.sync()\n        self.marks.append(time.perf_counter())",
        "        self.marks.append(time.perf_counter())",
        ("tests/test_workload.py::test_the_timed_region_lies_between_two_synchronisations",),
        "on a GPU each step mark would be read while kernels are queued: TTFT/TPOT meaningless",
    ),
    Mutation(
        "prefill-step-dropped",
        "bloomperf/measure/steptimer.py",
        "zip(self.marks, self.marks[1:], strict=False)",
        "zip(self.marks[1:], self.marks[2:], strict=False)",
        ("tests/test_latency.py::test_step_times_add_up_to_the_cycle_through_the_real_generate",),
        "TTFT would be a decode step and the cycle would lose its prefill",
    ),
    Mutation(
        "warm-up-timed",
        "bloomperf/plugin.py",
        "        return seconds[warmup:]",
        "        return seconds",
        ("tests/test_run.py::test_the_plugin_runs_the_matrix_with_pytest_benchmark",),
        "the cold first generate (allocator growth, kernel builds) would inflate every median",
    ),
    Mutation(
        "no-restart-after-oom",
        "bloomperf/harness/runner.py",
        "            memory = group.mark_memory()\n            self.stop()\n",
        "            memory = group.mark_memory()\n",
        ("tests/test_run.py::test_after_an_oom_the_worker_is_restarted_before_the_next_cell",),
        "a CUDA OOM can poison a process: the next cells would run on a broken worker",
    ),
    Mutation(
        "unexpected-oom-passes",
        "bloomperf/analysis/compare.py",
        "    if cell.outcome == Outcome.OOM:\n        return verdict(UNEXPECTED_OOM)",
        "    if cell.outcome == Outcome.OOM:\n        return verdict(EXPECTED_OOM)",
        ("tests/test_compare.py::test_an_oom_where_a_number_was_expected_fails",),
        "a change that makes a cell the baseline ran run out of memory would pass",
    ),
    Mutation(
        "errors-pass-the-gate",
        "bloomperf/analysis/compare.py",
        "    if cell.outcome == Outcome.ERROR:\n        return verdict(ERROR)",
        "    if cell.outcome == Outcome.ERROR:\n        return verdict(SKIPPED)",
        ("tests/test_compare.py::test_errors_and_timeouts_fail_skips_do_not",),
        "a backend that crashes on every cell would pass as skipped",
    ),
    Mutation(
        "plugin-run-never-complete",
        "bloomperf/plugin.py",
        "                context.update(finished)  # before pytest-benchmark writes it out",
        "                pass",
        ("tests/test_run.py::test_the_plugin_runs_the_matrix_with_pytest_benchmark",),
        "every pytest-benchmark JSON would read as an interrupted run and fail bloomperf diff",
    ),
    Mutation(
        "model-reloaded-per-cell",
        "bloomperf/harness/worker.py",
        "        self.inputs = build_inputs(",
        "        self.load()\n        self.inputs = build_inputs(",
        ("tests/test_run.py::test_run_measures_the_tiny_model_and_loads_once_per_group",),
        "a reload per cell would make load time and memory figures wrong and runs hours longer",
    ),
    Mutation(
        "zero-not-partitioned",
        "bloomperf/backends/ds_zero.py",
        '        "stage": 3,',
        '        "stage": 2,',
        ("tests/test_tp_shards.py::test_each_zero_rank_holds_half_of_each_parameter",),
        "every ZeRO rank would hold the whole model: the ZeRO rows would measure something else",
    ),
    Mutation(
        "launcher-argv-as-shell-words",
        "bloomperf/harness/multinode.py",
        '"--hostfile", str(hostfile)]',
        '*f"--hostfile {hostfile}".split()]',
        (
            "tests/test_security.py::"
            "test_a_hostfile_path_with_shell_syntax_reaches_the_launcher_as_one_argument",
        ),
        "a path joined into a command line is re-split (and, through a shell, run) by the launcher",
    ),
    Mutation(
        "wait-for-only-sleeps",
        "bloomperf/measure/slowdown.py",
        "    if seconds > SPIN_SECONDS:\n        time.sleep(seconds - SPIN_SECONDS)\n"
        "    while time.perf_counter() < end:\n        pass\n",
        "    time.sleep(seconds)\n",
        (
            "tests/test_slowdown.py::test_wait_for_is_precise[0.0002]",
            "tests/test_slowdown.py::test_wait_for_is_precise[0.003]",
        ),
        "every injected delay overshoots by the timer slack: short calls slowed more than asked",
    ),
    Mutation(
        "slowdown-waits-the-whole-call",
        "bloomperf/measure/slowdown.py",
        "wait_for((time.perf_counter() - start) * percent / 100.0)",
        "wait_for(time.perf_counter() - start)",
        ("tests/test_slowdown.py::test_real_bloom_generate_takes_percent_longer",),
        "a '10 %' slowdown would be 100 %: detection power would be measured on a 2x regression",
    ),
    Mutation(
        "synchronize-waits-for-nothing",
        "bloomperf/backends/base.py",
        "            for index in self.cuda_devices():\n"
        "                torch.cuda.synchronize(index)\n",
        "            pass\n",
        ("tests/test_worker.py::test_synchronize_waits_for_each_gpu_of_the_model",),
        "every timer read after synchronize would stop before the GPUs' queued kernels finish",
    ),
    Mutation(
        "history-merge-takes-a-conflicting-run",
        "bloomperf/store/history/merge.py",
        "    if key is not None and key == run_key(other) and not same_content:",
        "    if False:",
        ("tests/test_history_merge.py::test_a_conflicting_duplicate_is_refused_naming_the_file",),
        "two runners' files for one run with other figures: the history would keep both as nights",
    ),
    Mutation(
        "history-site-marks-no-change",
        "bloomperf/render/history/trend.py",
        "    return [c for c in topology.changes if c.cell == cell]",
        "    return []",
        (
            "tests/test_history_site.py::"
            "test_the_regressed_cell_is_marked_with_its_step_and_what_changed",
        ),
        "the published trend page of a regressed cell would show no step and no cause",
    ),
    Mutation(
        "report-what-changed-against-itself",
        "bloomperf/render/report/changes.py",
        "        return nights[mine[0] - 1] if mine[0] > 0 else None",
        "        return nights[mine[0]]",
        (
            "tests/test_report_changes.py::"
            "test_since_the_previous_night_the_report_lists_commit_driver_nccl_and_torch",
        ),
        "the report would compare a night with itself: 'nothing changed' on the night torch moved",
    ),
    Mutation(
        "offload-echoed",
        "bloomperf/backends/ds_zero.py",
        '"offload": applied_offload(self.engine),',
        '"offload": self._offload_option,',
        (
            "tests/test_ds_backends.py::"
            "test_zero_reports_the_offload_deepspeed_applied_not_the_option",
        ),
        "results would claim an offload ZeRO did not apply (a --ds-config override): the memory "
        "and speed of one layout filed under another",
    ),
    Mutation(
        "nvml-peak-is-the-last-sample",
        "bloomperf/measure/nvml_sampler.py",
        "self._peak_total = max(self._peak_total, sum(used))",
        "self._peak_total = sum(used)",
        ("tests/test_memory.py::test_nvml_peaks_over_time_per_device_and_per_process",),
        "GPU memory would read the last level, not the peak: a cell near OOM would look roomy",
    ),
    Mutation(
        "nvml-error-drops-the-peaks",
        "bloomperf/measure/nvml_sampler.py",
        '            self._failure = f"NVML failed mid-run: {exc}"',
        '            self._failure, self._samples = f"NVML failed mid-run: {exc}", 0',
        (
            "tests/test_memory.py::test_nvml_error_mid_run_keeps_the_peaks_taken_before",
            "tests/test_faults.py::test_nvml_failing_mid_run_reports_why_and_keeps_timings",
        ),
        "a GPU lost late in a cell would throw away the memory measured before it",
    ),
    Mutation(
        "remote-ranks-unmeasured",
        "bloomperf/harness/launch.py",
        "        if self.multinode and ranks:",
        "        if False and ranks:",
        ("tests/test_multinode.py::test_bloomperf_run_on_two_nodes_then_faults_on_the_second",),
        "a 2-node group's memory would be the controller's ssh clients, not the ranks: "
        "multi-node peaks read a few MB and never regress",
    ),
    Mutation(
        "markdown-cell-bar-unescaped",
        "bloomperf/core/formatting.py",
        '_MARKDOWN = re.compile(r"([\\\\`\\[\\]|]|<(?=[A-Za-z/!?]))")',
        '_MARKDOWN = re.compile(r"([\\\\`\\[\\]]|<(?=[A-Za-z/!?]))")',
        (
            "tests/test_tables.py::test_a_bar_in_a_markdown_cell_is_escaped_so_the_row_keeps_its_columns",
        ),
        "a message or version with a '|' would open a column: a report's table shifts under a PR",
    ),
    Mutation(
        "html-cell-unescaped",
        "bloomperf/core/formatting.py",
        "{html.escape(clean(value))}</td>",
        "{clean(value)}</td>",
        (
            "tests/test_tables.py::test_html_cells_are_escaped_and_only_marked_markup_goes_in_as_it_is",
        ),
        "a result's message could write markup into the report and history pages",
    ),
    # ---- a gate that judges or refuses; names and files one to one ----------------
    Mutation(
        "missing-judged-figure-passes",
        "bloomperf/analysis/compare.py",
        "    if missing and status != REGRESSED:",
        "    if False:",
        (
            "tests/test_gate_judges.py::test_deleting_a_gpu_cells_ms_per_token_samples_never_passes",
            "tests/test_gate_judges.py::test_a_cpu_cell_without_memory_readings_is_not_same",
        ),
        "deleting an ok cell's ms/token samples (GPU) or memory readings (CPU) passes a FAIL",
    ),
    Mutation(
        "nothing-judged-passes",
        "bloomperf/analysis/compare.py",
        'unjudged="" if allow_no_baseline else unjudged(comparison) or "",',
        'unjudged="",',
        (
            "tests/test_gate_judges.py::test_nothing_judged_exits_1_bad_named_input_2_and_the_opt_in_passes",
        ),
        "a gate with no baseline, or only another machine's, passes having compared nothing",
    ),
    Mutation(
        "wrong-json-type-coerced",
        "bloomperf/store/results/codec.py",
        'complete=get_bool(data, "complete", where, default=False),',
        'complete=bool(data.get("complete", False)),',
        (
            "tests/test_gate_judges.py::test_complete_as_text_or_number_is_refused",
            "tests/test_gate_judges.py::test_a_field_of_the_wrong_json_type_is_refused_never_coerced",
        ),
        '"complete": "false" reads as a finished run: an interrupted run passes the gate',
    ),
    Mutation(
        "duplicate-keys-last-wins",
        "bloomperf/core/jsonfile.py",
        "object_pairs_hook=_refuse_duplicate_keys",
        "object_pairs_hook=dict",
        ("tests/test_gate_judges.py::test_a_key_named_twice_anywhere_is_refused",),
        "a file naming a figure twice is judged on whichever the parser kept",
    ),
    Mutation(
        "benchmark-duplicate-cell-merged",
        "bloomperf/store/results/files.py",
        "        if cell.id in own_ids:",
        "        if False:",
        ("tests/test_gate_judges.py::test_a_cell_twice_is_refused_in_every_format",),
        "pytest-benchmark files merge a doubled cell silently where the native format refuses it",
    ),
    Mutation(
        "samples-unbounded",
        "bloomperf/store/results/codec.py",
        "    if len(values) > limit:",
        "    if False:",
        ("tests/test_gate_judges.py::test_more_samples_than_the_statistics_afford_are_refused",),
        "a 320 KB results file makes the bootstrap take gigabytes and minutes",
    ),
    Mutation(
        "workflow-command-through",
        "bloomperf/core/formatting.py",
        '    return _COMMAND.sub(": ", clean(text).replace("\\n", " "))',
        "    return clean(text)",
        (
            "tests/test_gate_judges.py::test_a_hostile_message_never_becomes_a_workflow_command_or_html",
        ),
        "a cell's message forges ::error / ::set-output lines in the CI runner's log",
    ),
    Mutation(
        "markdown-html-through",
        "bloomperf/core/formatting.py",
        '    return _MARKDOWN.sub(r"\\\\\\1", plain(text))',
        "    return plain(text)",
        (
            "tests/test_gate_judges.py::test_a_hostile_message_never_becomes_a_workflow_command_or_html",
        ),
        "a results file writes raw HTML and javascript links into report.md and step summaries",
    ),
    Mutation(
        "option-given-twice-kept-once",
        "bloomperf/harness/parsers.py",
        "        twice = sorted({n for n in names if names.count(n) > 1})",
        "        twice: list[str] = []",
        ("tests/test_gate_options.py::test_a_value_given_twice_is_refused_not_measured_twice",),
        "--dtypes fp32,fp32 measures each cell twice and keeps one",
    ),
    Mutation(
        "option-beyond-any-machine",
        "bloomperf/harness/parsers.py",
        "    if value > limit:",
        "    if False:",
        ("tests/test_gate_options.py::test_numbers_beyond_any_machine_or_reader_are_refused",),
        "--ssh-port 70000, --tp 10**9 or --new-tokens 10**9 are accepted, then fail or hang later",
    ),
    Mutation(
        "hostfile-read-late",
        "bloomperf/harness/parsers.py",
        "        read_hostfile(path)\n",
        "        pass\n",
        (
            "tests/test_gate_options.py::test_a_hostfile_that_is_missing_unreadable_or_garbage_is_refused",
        ),
        "run --hostfile with a missing or garbage file is accepted and ignored on one node",
    ),
    Mutation(
        "ab-install-error-is-regression",
        "bloomperf/harness/overlay.py",
        "{' '.join(pins)}: {reason}\", exit_code=2)",
        "{' '.join(pins)}: {reason}\", exit_code=1)",
        ("tests/test_gate_options.py::test_an_ab_arm_that_cannot_install_exits_2",),
        "a bad pin reads as a regression (exit 1) in CI, not as the input error it is",
    ),
    Mutation(
        "bisect-needs-pip-index-json",
        "bloomperf/cli/bisect.py",
        '    command = [sys.executable, "-m", "pip"]\n',
        '    command = [python, "-m", "pip"]\n',
        ("tests/test_gate_options.py::test_bisect_lists_versions_with_the_pip_it_installs_with",),
        "bisect depends on the pip a venv happens to have",
    ),
    Mutation(
        "baseline-names-collide",
        "bloomperf/store/baseline/search.py",
        '    return name.replace(".", "~d").replace("/", "~s")',
        '    return name.replace("/", "--")',
        (
            "tests/test_gate_judges.py::test_two_pairs_never_share_a_baseline_file_name",
            "tests/test_gate_judges.py::test_accepting_one_pair_never_replaces_anothers_baseline",
        ),
        "accept of topology a.b / model c replaces the baseline of topology a / model b.c",
    ),
    Mutation(
        "baseline-file-replaced-blindly",
        "bloomperf/store/baseline/search.py",
        "        if not (held.matches_topology(topology) and held.matches_model(model)):",
        "        if False:",
        ("tests/test_gate_judges.py::test_a_file_of_another_pair_at_the_target_name_is_refused",),
        "accept silently replaces another pair's baseline that sits at the target name",
    ),
    Mutation(
        "bisect-uninstallable-bad-is-a-finding",
        "bloomperf/cli/bisect.py",
        "    if steps[0].verdict == SKIPPED:",
        "    if False:",
        (
            "tests/test_bisect.py::"
            "test_a_bad_version_that_cannot_install_is_bad_input_not_a_finding",
        ),
        "a BAD pin that cannot install reads as 'not slower' (exit 1), not as bad input",
    ),
)
