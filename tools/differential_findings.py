"""What `differential_cadence1x.py` found: each `Difference`, classed by `classify` as one
of the README's "Differences from cadence 1.x" (by a short name) when it is exactly that
case, else as undocumented; the run's `Tally`, and its table and JSON (`report`).
"""

from __future__ import annotations

import argparse
import json
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


TYPED = "arguments-have-their-declared-json-types"

# The README's "Arguments have their declared JSON types": the fields whose JSON type the
# contract (cadence 1.x's TypeScript) declares, that type, whether leaving the field out
# (or null) is allowed, and the codes cadence-store refuses another type with.
DECLARED: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "runId": ("string", False, ("invalid-run-id",)),
    "operationId": ("string", False, ("invalid-operation-id",)),
    "change": ("string", True, ("invalid-change",)),
    "provisionalKey": ("string", True, ("invalid-run-lookup-key",)),
    "provisionalAliases": ("strings", True, ("invalid-run-lookup-key",)),
    "code": ("string", True, ("invalid-transition-code",)),
    "preempt": ("boolean", True, ("invalid-lease-option",)),
    "exclusive": ("boolean", True, ("invalid-lease-option",)),
    "outcome": ("object", False, ("operation-outcome-invalid",)),
}
# start_run refuses a change of another type as a lookup key when a key is given too
ALSO_REFUSED_AS = {("startRun", "change"): ("invalid-run-lookup-key",)}
# positional arguments, by call: the field each is
POSITIONAL = {
    "inspectOperation": ("runId", "operationId"),
    "status": ("runId",),
    "listEvents": ("runId",),
    "rebuildProjection": ("runId",),
    "verifyIntegrity": ("runId",),
    "commitLease": (None, "outcome"),  # the lease mapping: "lease-mappings-are-checked"
}


def has_declared_type(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind == "boolean":
        return isinstance(value, bool)
    return isinstance(value, dict)  # "object"


def arguments(call: Call) -> list[tuple[str, Any]]:
    """The call's (field, value) pairs that `DECLARED` names (a lease's own fields never)."""
    if call.name in POSITIONAL:
        return [
            (name, value)
            for name, value in zip(POSITIONAL[call.name], call.args, strict=False)
            if name is not None
        ]
    if not call.args:
        return []
    items = call.args[0] if isinstance(call.args[0], list) else [call.args[0]]
    return [
        (key, value)
        for item in items
        if isinstance(item, dict)
        for key, value in item.items()
        if key in DECLARED
    ]


def odd_typed(call: Call) -> dict[str, tuple[str, ...]]:
    """The fields of `call` holding a value of another JSON type than declared, each with
    the codes cadence-store refuses it with."""
    found: dict[str, tuple[str, ...]] = {}
    for name, value in arguments(call):
        kind, optional, codes = DECLARED[name]
        if (value is None and optional) or has_declared_type(kind, value):
            continue
        found[name] = codes + ALSO_REFUSED_AS.get((call.name, name), ())
    return found


def classify(call: Call, py: Outcome, js: Outcome, context: dict[str, Any]) -> str:
    """The README's name for this difference when it is exactly that case."""
    name, writes_py, writes_js = call.name, context["writes_py"], context["writes_js"]
    if py[0] == "error" and js != py and any(py[1] in codes for codes in odd_typed(call).values()):
        return TYPED
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


def _stored_json(value: Any) -> str:
    """The text cadence 1.x's `JSON.stringify` stored for a JSON value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def classify_verification(problem: str, run_id: str, accepted: list[tuple[Call, Outcome]]) -> str:
    """The README's name for cadence-store's refusal to verify run `run_id` of an adopted
    1.x file, when the episode's log (`accepted`: every call, with cadence 1.x's answer)
    shows the odd-typed call cadence 1.x accepted that wrote the row refused; else
    undocumented."""
    outcome = re.fullmatch(
        r"operation-outcome-invalid: run (\S+): operation (.+): outcome_json: "
        r"expected 'a JSON object', stored '(.*)'",
        problem,
        re.DOTALL,
    )
    if outcome is not None and outcome.group(1) == run_id:
        operation_id, stored = outcome.group(2), outcome.group(3)
        for call, js in accepted:
            lease = call.args[0] if call.name == "commitLease" else None
            if (
                js[0] == "ok"
                and isinstance(lease, dict)
                and "outcome" in odd_typed(call)
                and lease.get("runId") == run_id
                and lease.get("operationId") == operation_id
                and _stored_json(call.args[1]) == stored
            ):
                return TYPED
        return "undocumented"
    column = re.fullmatch(
        r"run-projection-integrity-mismatch: runs\.(change_name|provisional_key): "
        r"expected None, stored '(.*)'",
        problem,
        re.DOTALL,
    )
    if column is not None:
        field_name = {"change_name": "change", "provisional_key": "provisionalKey"}[column.group(1)]
        for call, js in accepted:
            if (
                call.name == "startRun"
                and js[0] == "ok"
                and field_name in odd_typed(call)
                and json.loads(js[1]).get("runId") == run_id
                # node:sqlite binds a JavaScript number as a REAL; STRICT TEXT keeps its text
                and isinstance(value := call.args[0][field_name], int | float)
                and not isinstance(value, bool)
                and column.group(2) == repr(float(value))
            ):
                return TYPED
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
