"""The nightly history: the folder of nights and each cell's series over them (``nights``), and
merging several folders (``merge``). What the nights say is ``bloomperf.analysis.changes``'s;
showing it ``bloomperf.render.history``'s; the command ``bloomperf.cli.history``."""
