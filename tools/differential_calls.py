"""The calls of `differential_cadence1x.py`: a seeded random choice of journal calls, each
written once in cadence 1.x's JavaScript shape (method name, argument objects), and the
same call made on cadence-store's `RunStore`.

Pure of I/O: `Chooser` picks the next call from what the driver has learned so far
(`Knowledge`: the runs, their states, the leases handed out, the clock), and
`call_cadence_store` makes that call in Python. Bad inputs are those cadence 1.x's API
takes from JavaScript: empty and oversized ids, odd unicode, numbers where a string is
expected, and the like; each carries `tags` naming what is odd about it.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from cadence_store import OperationLease, RunProjection
from cadence_store.journal.states import LEGAL_TRANSITIONS, RUN_STATES

MAX_SAFE_INTEGER = 2**53 - 1
MISSING_RUN = "00000000-0000-4000-8000-000000000000"
DROP = object()  # `Chooser.spoil`: the field is left out


def sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


CHANGES = ["alpha", "beta", "gamma", "delta-2"]
KEYS = [sha(f"provisional-{i}") for i in range(4)]
RECEIPTS = [sha("receipt-a"), sha("receipt-b")]
PROOFS: list[dict[str, Any] | None] = [
    None,
    {"revision": 1, "contractHash": sha("contract-1"), "recordHash": sha("record-1")},
    {"revision": 2, "contractHash": sha("contract-2"), "recordHash": sha("record-1")},
]
ODD_TEXT = "K\u212a \u017f \u00e9\u0301 \U0001f642 \ud800 \x00 \u2028 '\"\\ <&>"
CODES: list[Any] = [None, "", "awaiting-review", "x' WHERE 1=1; --", ODD_TEXT, "c" * 70_000]
TTLS = [1, 50, 1_000, 60_000]
JUMPS = [0, 1, 50, 1_000, 60_000, 60_001]
OUTCOMES: list[Any] = [
    {"ok": True},
    {"step": 3, "note": "'; DROP TABLE runs; --", "nested": {"b": [1, 2], "a": None}},
    {"n": 1.5, "big": 1e21, "small": 1e-7, "neg": -0.0, "whole": 3.0, "odd": ODD_TEXT},
    {"\u212a": 1, "K": 2, "\U0001f642": 3, "a\x00": 4, "": 5},
]
# bad inputs, by name: the fields each sets (DROP: leaves out)
START_SPOILERS: dict[str, dict[str, Any]] = {
    "unknown stage": {"stage": "abel-other"},
    "change not a name": {"change": "Alpha", "provisionalKey": DROP, "provisionalAliases": DROP},
    "empty change": {"change": "", "provisionalKey": DROP, "provisionalAliases": DROP},
    "change and key": {"change": "alpha", "provisionalKey": KEYS[0]},
    "neither change nor key": {"change": DROP, "provisionalKey": DROP},
    "key in upper case": {"provisionalKey": KEYS[0].upper(), "change": DROP},
    "eight aliases": {"provisionalKey": KEYS[0], "provisionalAliases": KEYS * 2, "change": DROP},
    "alias not a hash": {"provisionalKey": KEYS[0], "provisionalAliases": ["x" * 64]},
    "change with aliases": {"change": "alpha", "provisionalAliases": [KEYS[1]]},
    "implement run by key": {"stage": "abel-implement", "provisionalKey": KEYS[1]},
    "change of 129": {"change": "a" * 129, "provisionalKey": DROP, "provisionalAliases": DROP},
    "change a number": {"change": 7},
    "key a number": {"provisionalKey": 7},
}
CHANGE_SPOILERS: dict[str, dict[str, Any]] = {
    "empty change": {"change": ""},
    "change not a name": {"change": "Beta"},
    "change of 129": {"change": "b" * 129},
    "change odd unicode": {"change": ODD_TEXT},
    "change a number": {"change": 7},
}
PROOF = {"contractHash": sha("c"), "recordHash": sha("r")}
BINDING_SPOILERS: dict[str, dict[str, Any]] = {
    "revision 0": {"revision": 0},
    "revision a string": {"revision": "1"},
    "revision 2.0": {"revision": 2.0},
    "revision true": {"revision": True},
    "revision 2**53": {"revision": MAX_SAFE_INTEGER + 1},
    "unknown gate": {"gate": "gate-c"},
    "receipt in upper case": {"receiptHash": RECEIPTS[0].upper()},
    "proof revision 0": {"approvalProof": {"revision": 0, **PROOF}},
    "proof without recordHash": {"approvalProof": {"revision": 1, "contractHash": sha("c")}},
    "proof revision 1.0": {"approvalProof": {"revision": 1.0, **PROOF}},
}
TRANSITION_SPOILERS: dict[str, dict[str, Any]] = {
    "code a number": {"code": 5},
    "code true": {"code": True},
    "code a list": {"code": ["x"]},
    "empty run id": {"runId": ""},
    "run id a number": {"runId": 5},
}
LEASE_SPOILERS: dict[str, dict[str, Any]] = {
    "ttl 0": {"ttlMs": 0},
    "ttl 1.5": {"ttlMs": 1.5},
    "ttl a string": {"ttlMs": "5"},
    "ttl true": {"ttlMs": True},
    "ttl 60000.0": {"ttlMs": 60_000.0},
    "ttl 2**53": {"ttlMs": MAX_SAFE_INTEGER + 1},
    "preempt 1": {"preempt": 1},
    "exclusive a string": {"exclusive": "yes"},
}
# identifiers cadence 1.x accepts (/iu folds KELVIN SIGN and LONG S) or refuses
ODD_OPERATION_IDS: list[Any] = [
    "",
    "a" * 128,
    "a" * 129,
    "op.\u212a",
    "\u017fop",
    "op-\u0130",
    "-op",
    "op id",
    "op:1.2_3",
    "\U0001f642",
]
# JavaScript values cadence 1.x's API takes where a string is expected (a RegExp tests
# String(value); SQLite's STRICT TEXT columns store a number as its text)
NUMBER_OPERATION_IDS: list[Any] = [12345, 7]


@dataclass
class Call:
    """One call: cadence 1.x's method and arguments (JSON), and how it is odd."""

    name: str
    args: list[Any]
    write: str | None = None  # the *_atomically calls' host write: count, sql or throw
    tags: tuple[str, ...] = ()
    # the leases as cadence-store gets them: index in `args` path -> OperationLease object
    lease_objects: dict[str, OperationLease] = field(default_factory=dict)
    run_id: str | None = None  # the run it is about, when one

    @property
    def kind(self) -> str:
        return self.name + (f"[{self.write}]" if self.write else "")


@dataclass
class Knowledge:
    """What the driver learned from cadence-store's answers (the reference's ids)."""

    now: int = 1_700_000_000_000
    runs: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    stages: dict[str, str] = field(default_factory=dict)
    leases: list[tuple[dict[str, Any], OperationLease]] = field(default_factory=list)
    operations: dict[str, list[str]] = field(default_factory=dict)

    tokens: set[str] = field(default_factory=set)

    def learn(self, call: Call, value: Any) -> list[str]:
        """What cadence-store's answer to `call` teaches; the ids it made (in order), which
        cadence 1.x's `randomUUID` hands out for the same call."""
        made: list[str] = []
        if isinstance(value, RunProjection):
            if value.run_id not in self.states:
                made.append(value.run_id)
            self.learn_projection(json.loads(value.to_json()))
            data = call.args[0][-1] if isinstance(call.args[0], list) else call.args[0]
            if isinstance(data, dict):
                self.learn_operation(value.run_id, data.get("operationId"))
        elif isinstance(value, OperationLease):
            if value.token not in self.tokens:
                made.append(value.token)
                self.tokens.add(value.token)
            self.learn_lease(value)
            self.learn_operation(value.run_id, value.operation_id)
        return made

    def learn_projection(self, projection: dict[str, Any]) -> None:
        run_id = projection["runId"]
        if run_id not in self.states:
            self.runs.append(run_id)
        self.states[run_id] = projection["state"]
        self.sequences[run_id] = projection["sequence"]
        self.stages[run_id] = projection["stage"]

    def learn_lease(self, lease: OperationLease) -> None:
        self.leases.append((lease.to_dict(), lease))

    def learn_operation(self, run_id: str, operation_id: Any) -> None:
        if isinstance(operation_id, str):
            known = self.operations.setdefault(run_id, [])
            if operation_id not in known:
                known.append(operation_id)

    def live_expiries(self) -> list[int]:
        return sorted(
            {lease["expiresAt"] for lease, _ in self.leases if lease["expiresAt"] >= self.now}
        )


class Chooser:
    """The seeded random choice of the next call."""

    WEIGHTS = {
        "startRun": 12,
        "bindChange": 6,
        "bindDelivery": 8,
        "bindDeliveryAtomically": 5,
        "bindDeliveriesAtomically": 4,
        "transition": 22,
        "transitionAtomically": 6,
        "acquireLease": 9,
        "renewLease": 4,
        "assertLease": 3,
        "commitLease": 3,
        "interruptLease": 3,
        "inspectOperation": 6,
        "recoverExpiredLeases": 2,
        "status": 2,
        "listEvents": 2,
        "rebuildProjection": 1,
        "verifyIntegrity": 1,
        "clock": 6,
    }

    def __init__(self, seed: int, knowledge: Knowledge, bad_inputs: float = 0.12) -> None:
        self.random = random.Random(seed)
        self.known = knowledge
        self.bad_inputs = bad_inputs
        self.names = list(self.WEIGHTS)
        self.weights = list(self.WEIGHTS.values())
        self.counter = 0
        self.tags: list[str] = []  # how the call being made is odd

    def spoil(self, data: dict[str, Any], choices: dict[str, dict[str, Any]]) -> None:
        """One named bad input: its fields set on `data` (DROP: removed), its name tagged."""
        name = self.pick(sorted(choices))
        for key, value in choices[name].items():
            if value is DROP:
                data.pop(key, None)
            else:
                data[key] = value
        self.tags.append(name)

    # -- pieces ------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.random.random() < p

    def pick(self, values: list[Any]) -> Any:
        return values[self.random.randrange(len(values))]

    def run_id(self) -> str:
        if not self.known.runs or self.chance(0.05):
            return self.pick([MISSING_RUN, MISSING_RUN, "", ODD_TEXT])  # run-not-found
        return self.pick(self.known.runs)

    def op(self, kind: str, count: int = 8) -> Any:
        """An operation id: now and then one shared by every kind (replays across kinds),
        mostly the kind's own (so runs move on), rarely an odd one."""
        if self.chance(self.bad_inputs / 3):
            value = self.pick(ODD_OPERATION_IDS + NUMBER_OPERATION_IDS)
            self.tags.append(
                "number-operation-id" if isinstance(value, int) else f"odd-operation-id {value!r}"
            )
            return value
        if self.chance(0.04):
            return f"op-{self.random.randrange(2)}"
        return f"{kind}-{self.random.randrange(count)}"

    def lease(
        self, run_id: str | None
    ) -> tuple[dict[str, Any] | None, OperationLease | None, tuple[str, ...]]:
        """A lease to present: the run's own (mostly), another's, a forged or a malformed one."""
        if not self.known.leases:
            return None, None, ()
        own = [entry for entry in self.known.leases if entry[0]["runId"] == run_id]
        lease, model = self.pick(own) if own and self.chance(0.7) else self.pick(self.known.leases)
        roll, presented = self.random.random(), dict(lease)
        if roll < 0.08:
            return {**lease, "token": "forged-token"}, None, ("forged-lease",)
        if roll < 0.08 + self.bad_inputs / 2:
            # cadence-store checks a lease mapping's four fields and their JSON types
            malformed = {
                "lease without expiresAt": {"expiresAt": DROP},
                "lease token a number": {"token": 12345},
                "lease expiresAt a string": {"expiresAt": str(lease["expiresAt"])},
                "lease with an extra field": {"extra": True},
            }
            self.spoil(presented, malformed)
            return presented, None, ("malformed-lease", self.tags.pop())
        if roll < 0.1 + self.bad_inputs / 2:
            presented["expiresAt"] += 5  # cadence 1.x never reads it
            return presented, None, ("lease expiresAt not the grant's",)
        return presented, (model if self.chance(0.5) else None), ()

    # -- the calls ---------------------------------------------------------------------

    def next(self) -> Call:
        name = self.random.choices(self.names, self.weights)[0]
        self.counter += 1
        self.tags = []
        call: Call = getattr(self, f"_{name}")()
        call.tags += tuple(self.tags)
        return call

    def _clock(self) -> Call:
        expiries = self.known.live_expiries()
        if expiries and self.chance(0.4):
            target = self.pick(expiries) + (1 if self.chance(0.5) else 0)
            return Call("clock", [max(target, self.known.now)])
        return Call("clock", [self.known.now + self.pick(JUMPS)])

    def _startRun(self) -> Call:
        stage = "abel-design" if self.chance(0.6) else "abel-implement"
        data: dict[str, Any] = {"stage": stage}
        if stage == "abel-design" and self.chance(0.6):
            data["provisionalKey"] = self.pick(KEYS)
            if self.chance(0.3):
                data["provisionalAliases"] = [
                    self.pick(KEYS) for _ in range(self.random.randrange(1, 3))
                ]
        else:
            data["change"] = self.pick(CHANGES)
        data["operationId"] = self.op("start")
        if self.chance(self.bad_inputs):
            self.spoil(data, START_SPOILERS)
        return Call("startRun", [data])

    def _bindChange(self) -> Call:
        run_id = self.run_id()
        data = {"runId": run_id, "change": self.pick(CHANGES), "operationId": self.op("change")}
        if self.chance(self.bad_inputs):
            self.spoil(data, CHANGE_SPOILERS)
        return Call("bindChange", [data], run_id=run_id)

    def _binding(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": run_id,
            "gate": self.pick(["gate-a", "gate-b"]),
            "revision": self.random.randrange(1, 4),
            "receiptHash": self.pick(RECEIPTS),
        }
        proof = self.pick(PROOFS)
        if proof is not None:
            data["approvalProof"] = dict(proof)
        data["operationId"] = self.op("bind", 10)
        if self.chance(self.bad_inputs):
            self.spoil(data, BINDING_SPOILERS)
        return data

    def _with_lease(
        self, data: dict[str, Any], call: Call, path: str, chance: float = 0.33
    ) -> None:
        if not self.chance(chance):
            return
        lease, model, tags = self.lease(data.get("runId"))
        if lease is None:
            return
        data["lease"] = lease
        call.tags += tags
        if model is not None:
            call.lease_objects[path] = model

    def _bindDelivery(self) -> Call:
        data = self._binding(self.run_id())
        call = Call("bindDelivery", [data], run_id=data["runId"])
        self._with_lease(data, call, "0")
        return call

    def _write(self) -> str:
        return "count" if self.chance(0.85) else self.pick(["sql", "throw"])

    def _bindDeliveryAtomically(self) -> Call:
        call = self._bindDelivery()
        call.name, call.write = "bindDeliveryAtomically", self._write()
        return call

    def _bindDeliveriesAtomically(self) -> Call:
        run_id = self.run_id()
        first = self._binding(run_id)
        second = {
            "runId": run_id,
            "gate": "gate-b" if first["gate"] == "gate-a" else "gate-a",
            "revision": (first["revision"] if isinstance(first["revision"], int) else 1) + 1,
            "receiptHash": self.pick(RECEIPTS),
            "operationId": f"{first['operationId']}-next"
            if isinstance(first["operationId"], str)
            else "bind-next",
        }
        call = Call("bindDeliveriesAtomically", [[first, second]], self._write(), run_id=run_id)
        self._with_lease(first, call, "0.0")
        if "lease" in first and self.chance(0.9):
            second["lease"] = first["lease"]
            if "0.0" in call.lease_objects:
                call.lease_objects["0.1"] = call.lease_objects["0.0"]
        if self.chance(self.bad_inputs / 2):
            batch = self.pick(["no bindings", "two runs", "one binding"])
            self.tags.append(batch)
            if batch == "two runs":
                second["runId"] = MISSING_RUN
            else:
                call.args[0] = [] if batch == "no bindings" else [first]
        return call

    def _transition(self) -> Call:
        run_id = self.run_id()
        state = self.known.states.get(run_id)
        moves = list(LEGAL_TRANSITIONS.get(state, ())) if state else []
        if moves and self.chance(0.75):
            to = self.pick(moves)
        else:
            to = self.pick([*RUN_STATES, "no-such-state"])
        data: dict[str, Any] = {"runId": run_id, "to": to, "operationId": self.op("move", 24)}
        code = self.pick(CODES) if self.chance(0.3) else None
        if code is not None:
            data["code"] = code
        if self.chance(self.bad_inputs / 2):
            self.spoil(data, TRANSITION_SPOILERS)
        call = Call("transition", [data], run_id=run_id)
        self._with_lease(data, call, "0", 0.25)
        return call

    def _transitionAtomically(self) -> Call:
        call = self._transition()
        call.name, call.write = "transitionAtomically", self._write()
        return call

    def _acquireLease(self) -> Call:
        run_id = self.run_id()
        data: dict[str, Any] = {
            "runId": run_id,
            "operationId": self.op("lease", 6),
            "ttlMs": self.pick(TTLS),
        }
        for option in ("preempt", "exclusive"):
            if self.chance(0.3):
                data[option] = self.chance(0.5)
        if self.chance(self.bad_inputs):
            self.spoil(data, LEASE_SPOILERS)
        if self.chance(0.01):
            data["ttlMs"] = MAX_SAFE_INTEGER - self.known.now + 1
            self.tags.append("expiry past 2**53-1")
        return Call("acquireLease", [data], run_id=run_id)

    def _lease_call(self, name: str, *rest: Any) -> Call:
        lease, model, tags = self.lease(None)
        if lease is None:
            return self._acquireLease()
        call = Call(name, [lease, *rest], tags=tags, run_id=lease.get("runId"))
        if model is not None:
            call.lease_objects["0"] = model
        return call

    def _renewLease(self) -> Call:
        call = self._lease_call("renewLease", self.pick(TTLS))
        if call.name == "renewLease" and self.chance(self.bad_inputs):
            bad = self.pick([0, -1, 2.5, "10", MAX_SAFE_INTEGER + 1])
            call.args[1] = bad
            self.tags.append(f"ttl {bad!r}")
        elif call.name == "renewLease" and self.chance(0.01):
            call.args[1] = MAX_SAFE_INTEGER - self.known.now + 1
            self.tags.append("expiry past 2**53-1")
        return call

    def _assertLease(self) -> Call:
        return self._lease_call("assertLease")

    def _commitLease(self) -> Call:
        call = self._lease_call("commitLease", self.pick(OUTCOMES))
        if call.name == "commitLease" and self.chance(self.bad_inputs):
            bad = self.pick([[1, 2], "text", None, 5])
            call.args[1] = bad
            self.tags.append(f"outcome {type(bad).__name__}")
        return call

    def _interruptLease(self) -> Call:
        return self._lease_call("interruptLease")

    def _inspectOperation(self) -> Call:
        run_id = self.run_id()
        known = self.known.operations.get(run_id, [])
        op: Any = self.pick(known) if known and self.chance(0.85) else self.op("lease", 6)
        return Call("inspectOperation", [run_id, op], run_id=run_id)

    def _recoverExpiredLeases(self) -> Call:
        return Call("recoverExpiredLeases", [])

    def _read(self, name: str) -> Call:
        if self.chance(self.bad_inputs):
            self.tags.append("run id a number")
            return Call(name, [5])
        run_id = self.run_id()
        return Call(name, [run_id], run_id=run_id)

    def _status(self) -> Call:
        return self._read("status")

    def _listEvents(self) -> Call:
        return self._read("listEvents")

    def _rebuildProjection(self) -> Call:
        return self._read("rebuildProjection")

    def _verifyIntegrity(self) -> Call:
        return self._read("verifyIntegrity")
