"""What a mutation run's counts mean: which mutants are left alive, and whether the run passes.

mutmut (3.8.1, ``mutmut/stats.py``) gives each mutant one status. Only ``killed`` and ``caught
by type check`` are kills. Everything else is a mutant the tests let through: ``survived``,
``no tests`` (no test reaches it), ``timeout`` (the tests ran past mutmut's limit: on a slower
or busier runner a survivor can time out), ``suspicious`` (an exit status mutmut does not know),
``skipped``, ``segfault``, ``check was interrupted by user`` and ``not checked`` (the budget ran
out first). None of them is dropped or read as a kill: a slower runner must not pass more easily.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

KILLED = ("killed", "caught by type check")
# Printed in this order; a status mutmut adds later is printed after these, and counted as left.
KNOWN = (
    *KILLED,
    "survived",
    "no tests",
    "timeout",
    "suspicious",
    "skipped",
    "segfault",
    "check was interrupted by user",
    "not checked",
)


@dataclass(frozen=True)
class Tally:
    module: str
    statuses: dict[str, str]  # mutant name -> mutmut's status
    seconds: float
    problem: str = ""

    @property
    def mutants(self) -> int:
        return len(self.statuses)

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    @property
    def killed(self) -> int:
        return sum(self.count(s) for s in KILLED)

    @property
    def left(self) -> dict[str, str]:
        """Every mutant not killed, with its status."""
        return {n: s for n, s in sorted(self.statuses.items()) if s not in KILLED}

    def line(self) -> str:
        """``MODULE: N mutants = K killed + S survived + ...``: the terms add up to N."""
        seen = set(self.statuses.values())
        order = [*KNOWN, *sorted(seen - set(KNOWN))]
        terms = [f"{self.count(s)} {s}" for s in order if s in seen or s in KNOWN[:3]]
        return f"{self.module}: {self.mutants} mutants = {' + '.join(terms)} ({self.seconds:.0f} s)"


def load_survivors(path: Path) -> dict[str, dict[str, str]]:
    """module -> {mutant name: why it may survive}, from the committed survivor list."""
    if not path.exists():
        return {}
    with path.open("rb") as handle:
        listed = tomllib.load(handle)
    for module, names in listed.items():
        if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
            raise ValueError(f"{path}: [{module!r}] must map each mutant name to its reason")
    return listed


@dataclass(frozen=True)
class Verdict:
    lines: tuple[str, ...]
    failed: bool


def judge(tallies: list[Tally], listed: dict[str, dict[str, str]], max_unlisted: int) -> Verdict:
    """A module in the survivor list passes only if each mutant left alive is listed; a listed
    one now killed (or gone) is reported so that the list shrinks. The mutants left in modules
    with no list yet may number at most ``max_unlisted`` in all."""
    lines: list[str] = []
    failed = False
    unlisted = 0
    for tally in tallies:
        if tally.module not in listed:
            unlisted += len(tally.left)
            continue
        accepted = listed[tally.module]
        for name, status in tally.left.items():
            if name not in accepted:
                lines.append(f"new survivor ({status}), not in the survivor list: {name}")
                failed = True
        for name in sorted(set(accepted) - set(tally.left)):
            now = tally.statuses.get(name, "no longer a mutant")
            lines.append(f"listed survivor now {now}: remove it from the list: {name}")
    if unlisted > max_unlisted:
        lines.append(
            f"{unlisted} mutants left in modules with no survivor list, "
            f"more than the {max_unlisted} allowed"
        )
        failed = True
    return Verdict(tuple(lines), failed)


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"--shard wants K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


def shard(modules: list[str], sizes: dict[str, int], k: int, n: int) -> list[str]:
    """The modules of shard ``k`` of ``n``: largest first, each to the shard with the fewest
    lines so far (ties to the lower shard), so the shards' sizes are close; the same modules and
    sizes always give the same split. Each shard keeps the modules' given order."""
    totals = [0] * n
    owner: dict[str, int] = {}
    for module in sorted(modules, key=lambda m: (-sizes[m], m)):
        smallest = totals.index(min(totals))
        owner[module] = smallest
        totals[smallest] += sizes[module]
    return [m for m in modules if owner[m] == k - 1]
