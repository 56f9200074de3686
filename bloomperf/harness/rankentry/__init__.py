"""Holds only ``run_module.py``: a script path for launchers that cannot run ``python -m``."""
