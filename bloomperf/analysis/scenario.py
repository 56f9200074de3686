"""What the memory model and the roofline predict for: one row of the blog's tables, all but
the batch (``Scenario``), and a cell the suite measures, named the way the suite knows it
(``SuiteCell``: a topology id, and no shape for an external checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass

from bloomperf.catalog.hardware import GpuSpec, known_topology
from bloomperf.catalog.models import ModelShape, check_layers
from bloomperf.config.run import RunConfig

# The blog's prompts are a few words: the memory model and the roofline size them at 10 tokens.
PROMPT_TOKENS = 10
# The blog generates 100 tokens per prompt: what a run generates unless told otherwise.
NEW_TOKENS = RunConfig.new_tokens


@dataclass(frozen=True)
class Scenario:
    """``backend`` running the first ``layers`` blocks (None: all) of ``shape`` in ``dtype`` on
    ``n_gpus`` GPUs ``gpus`` spread over ``nodes`` nodes, generating ``new_tokens`` after a
    prompt of ``prompt_tokens``."""

    shape: ModelShape
    layers: int | None
    backend: str
    dtype: str
    gpus: GpuSpec
    n_gpus: int
    nodes: int = 1
    prompt_tokens: int = PROMPT_TOKENS
    new_tokens: int = NEW_TOKENS

    @property
    def n_layer(self) -> int:
        """The blocks this scenario runs (``--layers`` checked against the shape)."""
        return check_layers(self.layers, self.shape.n_layer, self.shape.name)


@dataclass(frozen=True)
class SuiteCell:
    """A cell the suite runs: ``shape`` is None for an external checkpoint, ``topology`` the id
    of the machine (``cpu`` on CPU)."""

    shape: ModelShape | None
    layers: int | None
    topology: str
    backend: str
    dtype: str
    batch: int
    new_tokens: int

    def scenario(self) -> Scenario | None:
        """None where the GPUs are not known (CPU, a mixed node, a GPU missing from the table)
        or there is no shape to count bytes from."""
        known = known_topology(self.topology)
        if self.shape is None or known is None:
            return None
        nodes, per_node, gpus = known
        return Scenario(
            self.shape,
            self.layers,
            self.backend,
            self.dtype,
            gpus,
            nodes * per_node,
            nodes,
            new_tokens=self.new_tokens,
        )
