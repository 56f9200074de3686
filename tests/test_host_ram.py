"""Host RAM as a Firecracker guest reports it: judged by what the loading path really holds.

accelerate and the meta-device loads read one weight file at a time and never hold a whole copy;
a MemTotal in doubt (a Firecracker guest starts small and grows with use) makes doctor warn, never
fail, and is named in a skip reason; a run that skipped every cell for host RAM says so first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.compare import host_ram_headline, incompleteness
from bloomperf.backends.ds_checkpoint import HOST_RAM_SKIP, host_memory_reason
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.topology import HOST_RAM_GIVEN, host_ram, ram_doubt
from bloomperf.catalog.weights import embedding_bytes, layer_bytes
from bloomperf.doctor.host import check_ram
from bloomperf.store.results import CellResult, Outcome
from tests.builders import tiny_run

GB = 10**9
SHAPE = MODEL_SHAPES["bloom-176b"]
PIECE = max(embedding_bytes(SHAPE, "bf16"), layer_bytes(SHAPE, "bf16"))


@given(
    layers=st.integers(1, SHAPE.n_layer),
    ranks=st.integers(1, 8),
    total=st.integers(1 * GB, 4000 * GB),
    doubt=st.sampled_from(["", "a Firecracker guest (kernel 6.18.44-fc-v236-gpu)"]),
)
@settings(max_examples=200, deadline=None)
def test_doctor_fails_only_where_no_loading_path_fits(
    layers: int, ranks: int, total: int, doubt: str
) -> None:
    check = check_ram("bloom-176b", layers, ranks, total, doubt)
    weights = SHAPE.parameters(layers) * 2
    if check.status == "fail":  # not even one weight file fits, and the figure is believed
        assert total < PIECE and not doubt, check
    if PIECE <= total < weights:  # accelerate and meta-device loads still run
        assert check.status == "warn" and "accelerate and meta-device loads can" in check.reason
    if weights * ranks <= total:
        assert check.status == ("warn" if doubt else "ok"), check
    if doubt:
        assert check.status != "fail" and doubt in check.reason


def test_a_firecracker_guest_or_a_balloon_puts_memtotal_in_doubt(tmp_path: Path) -> None:
    assert "Firecracker" in ram_doubt("6.18.44-fc-v236-gpu", tmp_path)
    assert ram_doubt("6.1.0-18-amd64", tmp_path) == ""
    (tmp_path / "virtio3").mkdir()
    assert "virtio balloon" in ram_doubt("6.1.0-18-amd64", tmp_path)


@given(
    need=st.integers(1, 10**12),
    ranks=st.integers(1, 8),
    host=st.integers(1, 10**12),
    load=st.sampled_from(["hf", "unsharded", "pre-sharded"]),
)
@settings(max_examples=100, deadline=None)
def test_host_ram_skips_follow_the_need_and_name_a_doubt(
    need: int, ranks: int, host: int, load: str
) -> None:
    believed = host_memory_reason(need, ranks, load, host)
    assert (believed is None) == (need * ranks <= host)
    doubted = host_memory_reason(need, ranks, load, host, doubt="a Firecracker guest")
    assert (doubted is None) == (believed is None)
    if believed:
        assert believed.startswith(HOST_RAM_SKIP)


def skipped(batch: int, reason: str) -> CellResult:
    return CellResult("ds-autotp", "bf16", batch, Outcome.SKIPPED, message=reason)


@given(batches=st.lists(st.integers(1, 64), min_size=1, max_size=5, unique=True))
def test_a_run_that_skipped_every_cell_for_host_ram_says_so_first(batches: list[int]) -> None:
    reason = f"{HOST_RAM_SKIP}1 ranks x 328.0 GiB host memory each (hf load) = ..."
    run = tiny_run(*(skipped(b, reason) for b in batches))
    headline = host_ram_headline(run)
    assert headline is not None and "skipped for host RAM" in headline
    gap = incompleteness(run)
    assert gap is not None and gap.startswith(headline)
    # One cell skipped for another reason: the run is not a host-RAM story.
    mixed = tiny_run(*(skipped(b, reason) for b in batches), skipped(99, "no GPU"))
    assert host_ram_headline(mixed) is None


# ---- the machine's documented RAM over MemTotal (--host-ram / BLOOMPERF_HOST_RAM) ------------


def test_the_host_ram_option_is_read_in_every_spelling() -> None:
    from bloomperf.harness.options import resolve_options

    assert resolve_options({"host_ram": "128GiB"}, env={}).host_ram == 128 * 2**30
    env = resolve_options({}, env={"BLOOMPERF_HOST_RAM": "128GiB"})
    assert env.host_ram == 128 * 2**30 and env.backend_options().host_ram == 128 * 2**30
    assert resolve_options({}, env={}).host_ram is None


def test_doctor_takes_the_given_ram_and_says_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bloomperf.cli import build_parser
    from bloomperf.cli.doctor import doctor_options
    from bloomperf.doctor.host import HostFacts, check_host_ram

    monkeypatch.setenv("BLOOMPERF_HOST_RAM", "128GiB")
    options = doctor_options(build_parser().parse_args(["doctor"]))
    assert options.host_ram == 128 * 2**30
    flag = doctor_options(build_parser().parse_args(["doctor", "--host-ram", "64GiB"]))
    assert flag.host_ram == 64 * 2**30  # the command line over the environment
    host = HostFacts.here(options.host_ram)
    assert (host.ram_bytes, host.ram_doubt, host.ram_source) == (128 * 2**30, "", HOST_RAM_GIVEN)
    check = check_host_ram("bloom-176b", 2, 1, host)
    assert check.status == "ok" and check.reason.endswith(f"(RAM from {HOST_RAM_GIVEN})")
    monkeypatch.delenv("BLOOMPERF_HOST_RAM")
    here = HostFacts.here(doctor_options(build_parser().parse_args(["doctor"])).host_ram)
    assert here.ram_source == "MemTotal" and here.ram_bytes == host_ram().bytes


@given(given=st.integers(1, 10**13), size=st.integers(1, 10**6))
@settings(max_examples=30, deadline=None)
def test_the_skip_rule_judges_by_the_given_ram(given: int, size: int) -> None:
    """A DeepSpeed group's host-RAM skip uses --host-ram when given, never MemTotal then."""
    import tempfile

    from bloomperf.backends.ds_inference import DeepSpeedInferenceBackend
    from bloomperf.config.backend import BackendOptions

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = Path(folder)
        (checkpoint / "model.safetensors").write_bytes(b"\0" * size)
        (checkpoint / "config.json").write_text('{"torch_dtype": "bfloat16"}')
        options = BackendOptions(host_ram=given)
        # TP=1 fp16: from_pretrained holds one whole copy (fp16 as large as the bf16 files).
        reason = DeepSpeedInferenceBackend.host_memory_reason(checkpoint, 1, "fp16", options)
    assert (reason is None) == (size <= given), reason
    if reason:
        assert reason.startswith(HOST_RAM_SKIP) and "may read low" not in reason


def test_the_figure_says_where_it_came_from() -> None:
    given = host_ram(128 * 2**30)
    assert given.describe() == f"host RAM 128.0 GiB from {HOST_RAM_GIVEN}"
    assert (
        host_ram().describe().startswith("host RAM ") and "from MemTotal" in host_ram().describe()
    )
