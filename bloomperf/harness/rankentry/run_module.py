"""``python run_module.py MODULE ARGS...`` runs MODULE as ``python -m MODULE ARGS...`` would.

DeepSpeed's Slurm runner starts ``python -u SCRIPT`` and ignores ``--module``; pdsh and mpirun
get the same script so that every launcher starts ranks one way. This folder holds nothing
else, because a script's folder becomes ``sys.path[0]`` and would shadow top-level modules.
"""

import runpy
import sys

if __name__ == "__main__":
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
