"""Run a check as another user than root: root reads and writes every file whatever its mode, so
a permission check run as root passes (or skips) by accident; CI runs as root.

Not a test. ``as_nobody(call, *args)`` runs ``call(*args)`` in a forked child that dropped root
for ``nobody`` and returns its (JSON-able) result; not root, it simply calls it. The child keeps
the interpreter and the modules already imported (``nobody`` may not read root's Python again):
import what the call needs before, for instance by running it once as root on a readable file.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import Any

NOBODY = 65534  # the kernel's overflow user and group: they own nothing, so file modes apply


def as_nobody(call: Callable[..., Any], *args: Any) -> Any:
    if os.geteuid() != 0:
        return call(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            answer = {"result": call(*args)}
        except BaseException:
            answer = {"error": traceback.format_exc()}
        try:
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    assert data, "the child run as nobody died without an answer"
    answer = json.loads(data)
    assert "error" not in answer, f"as nobody: {answer['error']}"
    return answer["result"]
