"""What `differential_cadence1x.py` found: each `Difference`, classed by `classify` as one
of the README's "Differences from cadence 1.x" (by a short name) when it is exactly that
case, else as undocumented; the run's `Tally`, and its table and JSON (`report`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from differential_calls import MAX_SAFE_INTEGER, Call
from differential_sides import Outcome


@dataclass
class Difference:
    kind: str  # README label, or "undocumented"
    where: str  # call kind (or "tables", "verification")
    seed: int
    episode: int
    step: int
    detail: dict[str, Any]

    def group(self) -> str:
        cadence_store_side = self.detail.get("cadence_store", ("", ""))
        cadence_1x_side = self.detail.get("cadence_1x", ("", ""))

        def sign(outcome: Any) -> str:
            if outcome[0] == "ok":
                return "ok"
            code = str(outcome[1])
            # one group for every pair of states
            return "invalid-run-transition" if code.startswith("invalid-run-transition:") else code

        if self.where in ("tables", "verification"):
            return f"{self.kind} | {self.where}: {self.detail.get('what', '')[:140]}"
        tags = ", ".join(tag for tag in self.detail.get("tags", ()) if tag != "malformed-lease")
        return (
            f"{self.kind} | {self.where}{f' ({tags})' if tags else ''}: "
            f"cadence-store {sign(cadence_store_side)} / cadence 1.x {sign(cadence_1x_side)}"
            + (" / writes differ" if self.detail.get("writes_differ") else "")
        )


@dataclass
class Tally:
    steps: int = 0
    episodes: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    differences: list[Difference] = field(default_factory=list)
    diverged_episodes: int = 0
    info: dict[str, Any] = field(default_factory=dict)


# tags that describe the lease presented, not the input that is odd
LEASE_TAGS = ("malformed-lease", "forged-lease", "lease ")


def cause(difference: Difference) -> str:
    """What an undocumented difference comes from: the odd inputs of its call, or the
    check and column a verification refused; "well-typed input" when there is none."""
    detail = difference.detail
    if difference.where == "verification":
        field = re.search(r"(\w+(?:\.\w+)?): expected", detail.get("problem", ""))
        return f"{detail['what']}{f' ({field.group(1)})' if field else ''}"
    if difference.where == "tables":
        return "tables differ after calls that answered alike"
    odd = [tag for tag in detail.get("tags", ()) if not tag.startswith(LEASE_TAGS)]
    return ", ".join(odd) if odd else "well-typed input"


def classify(call: Call, py: Outcome, js: Outcome, context: dict[str, Any]) -> str:
    """The README's name for this difference when it is exactly that case."""
    name, writes_py, writes_js = call.name, context["writes_py"], context["writes_js"]
    if (
        name in ("bindDeliveryAtomically", "bindDeliveriesAtomically")
        and writes_py == 0 < writes_js
    ):
        # cadence 1.x called `write` for a bind that appended nothing
        before, after = context["sequence_before"], context["sequence_after"]
        appended_nothing = py[0] == "ok" and before is not None and before == after
        if appended_nothing and (js == py or call.write in ("sql", "throw")):
            return "replayed-binds-skip-write"
    if (
        name == "acquireLease"
        and py == ("error", "operation-id-conflict")
        and js[0] == "ok"
        and context["operation_kind_before"] not in (None, "lease")
    ):
        return "journal-receipt-never-becomes-lease"
    if (
        name in ("acquireLease", "renewLease")
        and py == ("error", "invalid-lease-ttl")
        and js[0] == "ok"
    ):
        ttl = call.args[0]["ttlMs"] if name == "acquireLease" else call.args[1]
        if isinstance(ttl, int) and context["now"] + ttl > MAX_SAFE_INTEGER:
            return "lease-ttls-and-times-past-2**53-refused"
    if (
        call.write == "sql"
        and py == ("error", "run-store-host-write-failed")
        and js[1].startswith("sqlite-error: no such table: differential_missing_host_table")
    ):
        return "a-hosts-failure-is-the-hosts"
    if "malformed-lease" in call.tags and py == ("error", "invalid-lease"):
        return "lease-mappings-are-checked"
    return "undocumented"


def report(tally: Tally, seconds: float, arguments: argparse.Namespace) -> dict[str, Any]:
    groups: Counter[str] = Counter(difference.group() for difference in tally.differences)
    print(
        f"{tally.steps} steps in {tally.episodes} episodes (seed {arguments.seed}), "
        f"{seconds:.0f} s; {tally.diverged_episodes} episodes ended by a divergence"
    )
    print(f"\n{'calls':<44}{'count':>8}")
    for name, count in sorted(tally.calls.items()):
        print(f"{name:<44}{count:>8}")
    print(f"\n{'checks':<64}{'count':>8}")
    for name, count in sorted(tally.checks.items()):
        print(f"{name:<64}{count:>8}")
    print(f"\n{'differences (README label | call: answers)':<110}{'count':>8}")
    for name, count in sorted(groups.items()):
        print(f"{name:<110}{count:>8}")
    undocumented = [d for d in tally.differences if d.kind == "undocumented"]
    causes: Counter[str] = Counter(cause(difference) for difference in undocumented)
    print(f"\n{'undocumented differences by cause':<110}{'count':>8}")
    for name, count in sorted(causes.items()):
        print(f"{name:<110}{count:>8}")
    print(f"\n{len(tally.differences)} differences, {len(undocumented)} undocumented")
    for key, value in tally.info.items():
        print(f"{key}: {value}")
    first_of_each: dict[str, Difference] = {}
    for difference in tally.differences:
        first_of_each.setdefault(difference.group(), difference)
    return {
        "command": " ".join(sys.argv),
        "seed": arguments.seed,
        "steps": tally.steps,
        "episodes": tally.episodes,
        "seconds": round(seconds, 1),
        "diverged_episodes": tally.diverged_episodes,
        "calls": dict(sorted(tally.calls.items())),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "checks": dict(sorted(tally.checks.items())),
        "differences_by_kind": dict(sorted(groups.items())),
        "undocumented": len(undocumented),
        "undocumented_by_cause": dict(sorted(causes.items())),
        "first_of_each_kind": {key: vars(value) for key, value in sorted(first_of_each.items())},
        "differences": [
            {**vars(d), "detail": {k: v for k, v in d.detail.items() if k != "calls_before"}}
            for d in tally.differences
        ],
        "info": tally.info,
    }
