"""The base: the one user-facing error, units and tables, progress lines, interruption, the
atomic JSON file. Imports nothing else of bloomperf."""
