"""The version rules in ``backends/compat.py`` against the installed transformers' own code.

.ci/run runs this file in both profiles (transformers 5.x and 4.43.4), so each rule is checked
on a side where it says yes and on a side where it says no.
"""

from __future__ import annotations

import pytest
import torch

from bloomperf.backends.accelerate import AccelerateBackend
from bloomperf.backends.compat import int8_on_cpu_reason
from bloomperf.config.backend import BackendOptions

pytest.importorskip("bitsandbytes")

NO_GPU = "No GPU found. A GPU is needed for quantization."


@pytest.mark.skipif(torch.cuda.is_available(), reason="the rule is about machines without CUDA")
def test_int8_on_cpu_rule_is_what_the_8bit_quantizer_decides() -> None:
    """The rule says no exactly where transformers' 8-bit quantizer refuses a CUDA-less machine."""
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.auto import AutoHfQuantizer

    quantizer = AutoHfQuantizer.from_config(BitsAndBytesConfig(load_in_8bit=True))
    reason = int8_on_cpu_reason()
    if reason is None:
        quantizer.validate_environment(device_map="cpu")
    else:
        with pytest.raises(RuntimeError, match=NO_GPU):
            quantizer.validate_environment(device_map="cpu")


def test_the_accelerate_backend_skips_int8_on_cpu_for_that_reason() -> None:
    reason = AccelerateBackend.unmet_requirement("int8", "cpu", BackendOptions())
    assert reason == int8_on_cpu_reason()
    assert AccelerateBackend.unmet_requirement("int8", "cuda", BackendOptions()) is None
    assert AccelerateBackend.unmet_requirement("bf16", "cpu", BackendOptions()) is None
