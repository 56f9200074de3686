"""bloomperf: a pytest-based performance regression suite for BLOOM inference."""

__version__ = "0.1.0"
