"""OOM boundaries, by property (rules mutmut's first full run found unstated): the predicted
boundary is the largest batch of a fitting prefix under any layout, a row's boundary is that
one, and checking a baseline covers every row that has an OOM, whatever row comes first, with
its steps counted from "not even the smallest batch" as well.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.boundaries import check_boundaries, predict_boundary, predict_row
from bloomperf.analysis.memory_model import predict_cell
from bloomperf.analysis.scenario import Scenario
from bloomperf.catalog.hardware import GPU_SPECS
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.store.baseline import EXPECT_OK, EXPECT_OOM, Baseline, BaselineCell, Provenance

BLOOM = MODEL_SHAPES["bloom-176b"]
A100 = GPU_SPECS["A100-80GB"]
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LAYOUTS = (
    {},
    {"max_memory": "even"},
    {"max_memory": "blog"},
    {"max_memory": "uneven"},  # the first GPU capped at 30 GiB (uneven_map)
)


def uneven_map(n_gpus: int) -> str:
    return ",".join(f"{i}:{30 if i == 0 else 80}GiB" for i in range(n_gpus))


@settings(max_examples=40, deadline=None)
@given(
    n_gpus=st.sampled_from((4, 8)),
    dtype=st.sampled_from(("bf16", "int8")),
    layout=st.sampled_from(LAYOUTS),
    layers=st.sampled_from((None, 24, 70)),
)
def test_the_boundary_is_the_largest_batch_of_the_prefix_that_fits(
    n_gpus: int, dtype: str, layout: dict[str, object], layers: int | None
) -> None:
    if layout.get("max_memory") == "uneven":
        layout = {"max_memory": uneven_map(n_gpus)}
    scenario = Scenario(BLOOM, layers, "accelerate", dtype, A100, n_gpus)
    fits = [predict_cell(scenario, b, **layout).fits for b in BATCHES]
    prefix = next((i for i, f in enumerate(fits) if not f), len(fits))
    expected = BATCHES[prefix - 1] if prefix else None
    assert predict_boundary(scenario, BATCHES, **layout) == expected
    if not layout:
        assert predict_row(scenario, BATCHES).boundary == expected


def test_a_tighter_layout_moves_the_boundary_down() -> None:
    """A map that lets the first GPU take 70 GiB of weights leaves it less room for the cache
    than the default's even split: the layout is used. (One that gives it 30 GiB does not move
    it: the first GPU then holds fewer blocks and the copies of more.)"""
    scenario = Scenario(BLOOM, None, "accelerate", "bf16", A100, 8)
    tight = {"max_memory": ",".join(f"{i}:{80 if i else 70}GiB" for i in range(8))}
    default = predict_boundary(scenario, BATCHES)
    assert default is not None
    tighter = predict_boundary(scenario, BATCHES, **tight)
    assert tighter is None or tighter < default


PROVENANCE = (Provenance("p", "test", "2026-11-30", "8xA100", {}),)


def baseline(
    rows: dict[tuple[str, str], tuple[int | None, int | None]], layers: int | None
) -> Baseline:
    """Per row: (largest batch that ran or None, smallest OOM or None)."""
    cells = []
    for (backend, dtype), (ran, oom) in rows.items():
        for b in BATCHES:
            if ran is not None and b <= ran:
                cells.append(BaselineCell(backend, dtype, b, EXPECT_OK, 10.0, provenance="p"))
            elif oom is not None and b == oom:
                cells.append(BaselineCell(backend, dtype, b, EXPECT_OOM, provenance="p"))
    return Baseline(
        "8xA100-SXM4-80GB", (), "", "bloom-176b", (), layers, None, PROVENANCE, tuple(cells)
    )


def test_every_row_with_an_oom_is_checked_whatever_comes_before_it() -> None:
    rows = {
        ("ds-inference", "fp16"): (32, None),  # no OOM: not a boundary to check
        ("accelerate", "bf16"): (32, 64),
        ("accelerate", "int8"): (None, 1),  # not even batch 1 ran
    }
    checks = {
        (c.backend, c.dtype): c for c in check_boundaries(baseline(rows, None), BLOOM, A100, 8)
    }
    assert set(checks) == {("accelerate", "bf16"), ("accelerate", "int8")}
    bf16, int8 = checks[("accelerate", "bf16")], checks[("accelerate", "int8")]
    assert (bf16.reference, bf16.reference_oom) == (32, 64)
    assert (int8.reference, int8.reference_oom) == (None, 1)
    batches = tuple(sorted({1, 2, 4, 8, 16, 32, 64}))
    for check in (bf16, int8):
        # Steps between the predicted and the measured boundary; "none ran" is one step below
        # the smallest batch.
        def step(batch: int | None) -> int:
            return -1 if batch is None else batches.index(batch)

        assert check.steps_off == step(check.predicted) - step(check.reference), check


@pytest.mark.parametrize("layers", [None, 4])
def test_the_check_predicts_the_baselines_own_number_of_layers(layers: int | None) -> None:
    """A baseline of a truncated BLOOM (``model_layers``) is checked against a prediction for
    that many blocks: four blocks fit far larger batches than seventy."""
    rows = {("accelerate", "bf16"): (512, 1024)}
    [check] = check_boundaries(replace(baseline(rows, layers)), BLOOM, A100, 8)
    scenario = Scenario(BLOOM, layers, "accelerate", "bf16", A100, 8)
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    assert check.predicted == predict_boundary(scenario, batches)
    full = predict_boundary(Scenario(BLOOM, None, "accelerate", "bf16", A100, 8), batches)
    assert (check.predicted == full) == (layers is None)
    full, truncated = (
        predict_boundary(Scenario(BLOOM, n, "accelerate", "bf16", A100, 1), BATCHES)
        for n in (None, 4)
    )
    assert truncated is not None and (full is None or truncated > full)
