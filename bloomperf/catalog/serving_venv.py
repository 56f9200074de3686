"""Where the serving venv's interpreter is: vLLM lives there, not in the main venv (its torch
and transformers pins differ). `bloomperf serve` and the vllm backend's workers both run it."""

from __future__ import annotations

import os
from pathlib import Path

SERVING_PYTHON_ENV = "BLOOMPERF_SERVING_PYTHON"
DEFAULT_SERVING_PYTHON = Path(".venv-serving/bin/python")
BUILD_HINT = "build the serving venv with BLOOMPERF_PROFILE=serving bash .ci/setup"


def serving_python_path(given: Path | None = None) -> Path:
    """``given``, else $BLOOMPERF_SERVING_PYTHON, else .venv-serving/ here (may not exist)."""
    env = os.environ.get(SERVING_PYTHON_ENV)
    return (given or (Path(env) if env else DEFAULT_SERVING_PYTHON)).absolute()
