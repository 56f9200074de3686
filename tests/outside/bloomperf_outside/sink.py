"""A dashboard push, as a team would write one: every recorded cell and the finished run's
verdict, appended as JSON lines to the file ``$BLOOMPERF_OUTSIDE_SINK`` names (nothing when it
is unset). It uses only the sink's two methods and the objects they are given."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TARGET_ENV = "BLOOMPERF_OUTSIDE_SINK"


class JsonLinesSink:
    name = "outside-jsonlines"

    def __init__(self) -> None:
        target = os.environ.get(TARGET_ENV)
        self.target = Path(target) if target else None

    def push(self, record: dict[str, Any]) -> None:
        if self.target is None:
            return
        with self.target.open("a", encoding="utf-8") as f:  # a missing folder raises here
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def cell_recorded(self, cell: Any, run: Any) -> None:
        self.push(
            {
                "event": "cell",
                "id": cell.id,
                "outcome": cell.outcome.value,
                "ms_per_token": cell.ms_per_token,
                "cells_so_far": len(run.cells),
            }
        )

    def run_finished(self, run: Any, verdicts: Any, context: Any) -> None:
        self.push(
            {
                "event": "finished",
                "source": context.source,
                "results": str(context.output),
                "complete": run.complete,
                "cells": len(run.cells),
                "verdict": "fail" if verdicts.failed else "pass",
                "statuses": {c.id: c.status for c in verdicts.cells},
            }
        )
