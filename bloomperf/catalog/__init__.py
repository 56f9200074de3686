"""Domain facts, each once: BLOOM shapes, dtypes, GPUs and topologies, checkpoints, the
workload, the OOM texts of every library."""
