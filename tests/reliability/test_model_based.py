"""Issue 7: the store agrees with a small, independent model of the cadence 1.x rules.

A hypothesis ``RuleBasedStateMachine`` drives random sequences of every journal call —
start_run (design / implement, change / provisional keys and aliases, replayed and
conflicting operation ids), bind_change, bind_delivery (same / different receipts, proofs,
replays, under leases; plain, ``*_atomically`` and ``bind_deliveries_atomically``),
transition (legal and illegal targets, unknown states, pause codes, replays, leases,
``transition_atomically``), acquire_lease (preempt / exclusive), renew_lease,
assert_lease, commit_lease, interrupt_lease, inspect_operation, recover_expired_leases,
and a fake clock jumping forward — against the real store and ``Model``, a pure
in-memory reimplementation of the cadence 1.x ``RunStore`` written from its source
(run-store-1.8.3-removed.diff) and the design document, sharing no code with
``cadence_store`` (hashes, canonical JSON, projections and key order are recomputed here).

After every step:
- the call's outcome (a projection / lease / status as
  ``model_dump(mode="json", by_alias=True, exclude_none=True)``, or the error code) is
  the model's; projections also match byte for byte (``to_json``: cadence 1.x key order);
- the four owned tables hold exactly the model's rows (so a failed call wrote nothing);
- every run's chain verifies, and ``verify_integrity`` == ``rebuild_projection`` ==
  ``status``;
- no event that was ever seen changed: (run, sequence) -> hash is append-only;
- every ``*_atomically`` call's host write (a row in a host table) happened exactly once
  per call that appended an event, never for a replayed operation id (issue 11).

Run ids and lease tokens are random: the model learns each one from the store when it
predicts that a new run / lease is made (and checks that it is new).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Column, Engine, Integer, MetaData, Table, Text, create_engine, delete, select
from sqlalchemy.orm import Session
from support import FakeClock

import cadence_store
from cadence_store import BindDelivery, CadenceStoreError, OperationLease, RunStore
from cadence_store.storage.models import delivery_bindings, events, operations, runs

ROOT = "ab" * 32
ZERO = "0" * 64

# -- the cadence 1.x rules, written out again (run-state.ts / run-store.ts) ----------------

STATES = (
    "created",
    "validating-delivery",
    "ready",
    "queued",
    "connecting",
    "running",
    "validating",
    "verifying",
    "retryable",
    "paused",
    "approval-needed",
    "change-verifying",
    "ready-to-apply",
    "applying",
    "recovering",
    "completed",
    "discarded",
    "rejected",
)
TERMINAL = ("completed", "discarded", "rejected")
MOVES: dict[str, tuple[str, ...]] = {
    "created": ("validating-delivery", "paused", "discarded", "rejected"),
    "validating-delivery": ("ready", "paused", "approval-needed", "discarded", "rejected"),
    "ready": ("queued", "running", "paused", "discarded", "rejected"),
    "queued": ("connecting", "running", "paused", "discarded"),
    "connecting": ("running", "retryable", "paused", "discarded"),
    "running": (
        "validating",
        "verifying",
        "queued",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ),
    "validating": ("running", "verifying", "retryable", "paused", "approval-needed", "discarded"),
    "verifying": (
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ),
    "retryable": ("queued", "connecting", "running", "paused", "discarded"),
    "paused": (
        "paused",
        "validating-delivery",
        "ready",
        "queued",
        "connecting",
        "running",
        "approval-needed",
        "recovering",
        "completed",
        "discarded",
        "rejected",
    ),
    "approval-needed": ("validating-delivery", "paused", "discarded", "rejected"),
    "change-verifying": (
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "ready-to-apply",
        "discarded",
    ),
    "ready-to-apply": ("applying", "paused", "discarded"),
    "applying": ("recovering", "completed"),
    "recovering": ("applying", "paused", "completed", "discarded", "rejected"),
    "completed": (),
    "discarded": (),
    "rejected": (),
}


def js(value: Any) -> str:
    """JSON.stringify for the plain ASCII values this model stores (insertion order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def event_hash(sequence: int, type_: str, payload: dict[str, Any], prior: str) -> str:
    canonical = json.dumps(
        {"sequence": sequence, "type": type_, "payload": payload, "priorHash": prior},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class ModelError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class MRun:
    run_id: str
    stage: str
    lookup_key: str
    change: str | None
    provisional_key: str | None
    doc: dict[str, Any]
    events: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    # (gate, revision) -> (receipt, proof revision, contract, record, operation id)
    bindings: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)


@dataclass
class MOp:
    kind: str
    state: str
    outcome: str | None = None
    token: str | None = None
    expires: int | None = None
    fence: int | None = None  # the current or last grant's; grows with each grant


NEW = "<a new token>"  # the store is expected to issue a fresh lease token here


class Model:
    """cadence 1.x's RunStore rules on plain dicts (cadence-store's documented choices:
    a journal receipt is never turned into a lease; the state-table codes)."""

    def __init__(self) -> None:
        self.runs: dict[str, MRun] = {}
        self.ops: dict[tuple[str, str], MOp] = {}
        self.replays = 0  # calls answered from a receipt

    # -- rows ---------------------------------------------------------------------------

    def _record(self, run_id: str, op: str, kind: str, outcome: str) -> None:
        existing = self.ops.get((run_id, op))
        if existing is None:
            self.ops[(run_id, op)] = MOp(kind, "committed", outcome)
        else:  # ON CONFLICT DO UPDATE: kind kept
            existing.state, existing.outcome = "committed", outcome
            existing.token = existing.expires = None

    def _append(self, run: MRun, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        doc = run.doc
        sequence = doc["sequence"] + 1
        prior = doc["eventHash"]
        digest = event_hash(sequence, type_, payload, prior)
        new = dict(doc)
        if type_ == "change-bound":
            new.pop("provisionalKey", None)
            new["change"] = payload["change"]
        elif type_ == "delivery-bound":
            binding = {k: payload[k] for k in ("gate", "revision", "receiptHash")}
            if "approvalProof" in payload:
                binding["approvalProof"] = dict(payload["approvalProof"])
            new["deliveryBindings"] = sorted(
                [*doc["deliveryBindings"], binding], key=lambda b: (b["revision"], b["gate"])
            )
            new["deliveryRevision"] = max(doc.get("deliveryRevision") or 0, payload["revision"])
        elif type_ == "state-transitioned":
            source, target = doc["state"], payload["to"]
            if target not in MOVES[source]:
                raise ModelError(f"invalid-run-transition:{source}:{target}")
            new = {k: v for k, v in doc.items() if k not in ("pauseCode", "terminal")}
            new["state"] = target
            if "code" in payload:
                new["pauseCode"] = payload["code"]
            if target in TERMINAL:
                new["terminal"] = target
        new["sequence"] = sequence
        new["eventHash"] = digest
        run.events.append((sequence, type_, js(payload), prior, digest))
        run.doc = new
        return new

    def _live(self, lease: dict[str, Any], now: int) -> MOp:
        row = self.ops.get((lease["runId"], lease["operationId"]))
        if (
            row is None
            or row.state != "running"
            or row.token != lease["token"]
            or lease.get("fence", 0) not in (0, row.fence or 0)
            or row.expires is None
            or row.expires < now
        ):
            raise ModelError("lease-fenced")
        return row

    def _replay(self, run_id: str, op: str, kind: str) -> str | None:
        row = self.ops.get((run_id, op))
        if row is not None and row.kind != kind:
            raise ModelError("operation-id-conflict")
        if row is None or row.state != "committed" or row.outcome is None:
            return None
        self.replays += 1
        return row.outcome

    def _run(self, run_id: str) -> MRun:
        if run_id not in self.runs:
            raise ModelError("run-not-found")
        return self.runs[run_id]

    def _by_key(self, stage: str, key: str) -> MRun | None:
        return next(
            (r for r in self.runs.values() if r.stage == stage and r.lookup_key == key), None
        )

    # -- calls: each returns the JSON of the expected result (or raises ModelError) -----

    def start_run(
        self,
        stage: str,
        op: str,
        change: str | None,
        key: str | None,
        aliases: list[str] | None,
        new_id: Callable[[], str],
    ) -> str:
        if change is not None:
            keys = [f"change:{change}"]
        else:
            assert key is not None
            if stage != "abel-design":
                raise ModelError("provisional-run-requires-design")
            keys = [f"provisional:{k}" for k in dict.fromkeys([key, *(aliases or [])])]
        receipts = [
            (run_id, row)
            for (run_id, op_id), row in self.ops.items()
            if op_id == op and self.runs[run_id].stage == stage
        ]
        if receipts:
            replay = [
                (run_id, row)
                for run_id, row in receipts
                if row.kind == "start"
                and row.state == "committed"
                and row.outcome is not None
                and self.runs[run_id].lookup_key in keys
            ]
            if len(receipts) != 1 or not replay:
                raise ModelError("operation-id-conflict")
            assert replay[0][1].outcome is not None
            self.replays += 1
            return replay[0][1].outcome
        existing: MRun | None = None
        for k in keys:
            candidate = self._by_key(stage, k)
            if candidate and existing and candidate.run_id != existing.run_id:
                raise ModelError("run-lookup-conflict")
            existing = existing or candidate
        if existing is not None:
            if stage == "abel-design" and existing.doc["state"] in TERMINAL:
                existing.lookup_key = f"terminal:{existing.run_id}"
            else:
                self._record(existing.run_id, op, "start", js(existing.doc))
                return js(existing.doc)
        run_id = new_id()
        payload: dict[str, Any] = {"runId": run_id, "rootHash": ROOT, "stage": stage}
        if change is not None:
            payload["change"] = change
        if key is not None:
            payload["provisionalKey"] = key
        digest = event_hash(1, "run-created", payload, ZERO)
        doc = {**payload, "state": "created", "sequence": 1, "eventHash": digest}
        doc["deliveryBindings"] = []
        run = MRun(run_id, stage, keys[0], change, key, doc)
        run.events.append((1, "run-created", js(payload), ZERO, digest))
        self.runs[run_id] = run
        self._record(run_id, op, "start", js(doc))
        return js(doc)

    def bind_change(self, run_id: str, change: str, op: str) -> str:
        replay = self._replay(run_id, op, "change-bound")
        if replay is not None:
            return replay
        run = self._run(run_id)
        if run.doc["stage"] != "abel-design" or not run.doc.get("provisionalKey"):
            raise ModelError("change-binding-not-allowed")
        owner = self._by_key(run.stage, f"change:{change}")
        if owner is not None and owner.run_id != run_id:
            raise ModelError("change-run-already-exists")
        run.lookup_key, run.change, run.provisional_key = f"change:{change}", change, None
        doc = self._append(run, "change-bound", {"change": change})
        self._record(run_id, op, "change-bound", js(doc))
        return js(doc)

    def bind_delivery(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt: str,
        op: str,
        proof: dict[str, Any] | None,
        lease: dict[str, Any] | None,
        now: int,
    ) -> str:
        if lease is not None:
            if lease["runId"] != run_id:
                raise ModelError("lease-fenced")
            self._live(lease, now)
        replay = self._replay(run_id, op, "delivery-bound")
        if replay is not None:
            return replay
        run = self._run(run_id)
        wanted = (
            receipt,
            proof["revision"] if proof else None,
            proof["contractHash"] if proof else None,
            proof["recordHash"] if proof else None,
        )
        existing = run.bindings.get((gate, revision))
        if existing is not None:
            if existing[:4] != wanted:
                raise ModelError("delivery-revision-conflict")
            self._record(run_id, op, "delivery-bound", js(run.doc))
            return js(run.doc)
        run.bindings[(gate, revision)] = (*wanted, op)
        payload: dict[str, Any] = {"gate": gate, "revision": revision, "receiptHash": receipt}
        if proof is not None:
            payload["approvalProof"] = dict(proof)
        doc = self._append(run, "delivery-bound", payload)
        self._record(run_id, op, "delivery-bound", js(doc))
        return js(doc)

    def transition(
        self,
        run_id: str,
        to: str,
        op: str,
        code: str | None,
        lease: dict[str, Any] | None,
        now: int,
    ) -> str:
        if lease is not None:
            if lease["runId"] != run_id:
                raise ModelError("lease-fenced")
            self._live(lease, now)
        replay = self._replay(run_id, op, "state-transitioned")
        if replay is not None:
            return replay
        run = self._run(run_id)
        if to not in STATES:
            raise ModelError("event-integrity-state-mismatch")
        payload: dict[str, Any] = {"from": run.doc["state"], "to": to}
        if code:
            payload["code"] = code
        doc = self._append(run, "state-transitioned", payload)
        self._record(run_id, op, "state-transitioned", js(doc))
        return js(doc)

    def acquire_lease(
        self,
        run_id: str,
        op: str,
        ttl: int,
        preempt: bool,
        exclusive: bool,
        now: int,
    ) -> dict[str, Any]:
        self._run(run_id)
        row = self.ops.get((run_id, op))
        if row is not None and row.kind != "lease":
            raise ModelError("operation-id-conflict")
        if (
            row is not None
            and row.state == "running"
            and row.token
            and row.expires is not None
            and row.expires >= now
            and not preempt
        ):
            if exclusive:
                raise ModelError("operation-already-running")
            return {
                "runId": run_id,
                "operationId": op,
                "token": row.token,
                "expiresAt": row.expires,
                "fence": row.fence or 0,
            }
        if row is None:
            row = self.ops[(run_id, op)] = MOp("lease", "running")
        row.state, row.outcome, row.token, row.expires = "running", None, NEW, now + ttl
        row.fence = (row.fence or 0) + 1
        return {
            "runId": run_id,
            "operationId": op,
            "token": NEW,
            "expiresAt": now + ttl,
            "fence": row.fence,
        }

    def renew_lease(self, lease: dict[str, Any], ttl: int, now: int) -> dict[str, Any]:
        row = self._live(lease, now)
        row.expires = now + ttl
        return {**lease, "expiresAt": now + ttl, "fence": row.fence or 0}

    def assert_lease(self, lease: dict[str, Any], now: int) -> None:
        self._live(lease, now)

    def commit_lease(self, lease: dict[str, Any], outcome: dict[str, Any], now: int) -> Any:
        row = self._live(lease, now)
        row.state, row.outcome, row.token, row.expires = "committed", js(outcome), None, None
        return json.loads(js(outcome))

    def interrupt_lease(self, lease: dict[str, Any], now: int) -> None:
        row = self._live(lease, now)
        row.state, row.outcome, row.token, row.expires = "interrupted", None, None, None

    def inspect_operation(self, run_id: str, op: str, now: int) -> dict[str, Any] | None:
        self._run(run_id)
        row = self.ops.get((run_id, op))
        if row is None:
            return None
        if row.state == "running" and row.expires is not None and row.expires < now:
            row.state, row.token, row.expires = "interrupted", None, None
        status: dict[str, Any] = {"state": row.state}
        if row.outcome is not None:
            status["outcome"] = json.loads(row.outcome)
        if row.expires is not None:
            status["expiresAt"] = row.expires
        if row.kind == "lease" and row.fence is not None:
            status["fence"] = row.fence
        return status

    def recover_expired_leases(self, now: int) -> int:
        count = 0
        for row in self.ops.values():
            if row.state == "running" and row.expires is not None and row.expires < now:
                row.state, row.token, row.expires = "interrupted", None, None
                count += 1
        return count

    # -- the tables the store should hold -----------------------------------------------

    def tables(self) -> dict[str, list[tuple[Any, ...]]]:
        run_rows = sorted(
            (
                r.run_id,
                ROOT,
                r.stage,
                r.lookup_key,
                r.change,
                r.provisional_key,
                r.doc["state"],
                r.doc["sequence"],
                r.doc["eventHash"],
                r.doc.get("deliveryRevision"),
                js(r.doc),
                r.doc.get("terminal"),
            )
            for r in self.runs.values()
        )
        event_rows = sorted((r.run_id, *e) for r in self.runs.values() for e in r.events)
        op_rows = sorted(
            (run_id, op, row.kind, row.state, row.outcome, row.token, row.expires, row.fence)
            for (run_id, op), row in self.ops.items()
        )
        binding_rows = sorted(
            (r.run_id, gate, revision, b[0], b[4], b[1], b[2], b[3])
            for r in self.runs.values()
            for (gate, revision), b in r.bindings.items()
        )
        return {
            "runs": run_rows,
            "events": event_rows,
            "operations": op_rows,
            "delivery_bindings": binding_rows,
        }


# -- reading the store's tables ---------------------------------------------------------------

_COLUMNS = {
    "runs": [
        runs.c.run_id,
        runs.c.root_hash,
        runs.c.stage,
        runs.c.lookup_key,
        runs.c.change_name,
        runs.c.provisional_key,
        runs.c.state,
        runs.c.sequence,
        runs.c.event_hash,
        runs.c.delivery_revision,
        runs.c.projection_json,
        runs.c.terminal_tombstone,
    ],
    "events": [
        events.c.run_id,
        events.c.sequence,
        events.c.type,
        events.c.payload_json,
        events.c.prior_hash,
        events.c.event_hash,
    ],
    "operations": [
        operations.c.run_id,
        operations.c.operation_id,
        operations.c.kind,
        operations.c.state,
        operations.c.outcome_json,
        operations.c.lease_token,
        operations.c.lease_expires_at,
        operations.c.lease_fence,
    ],
    "delivery_bindings": [
        delivery_bindings.c.run_id,
        delivery_bindings.c.gate,
        delivery_bindings.c.revision,
        delivery_bindings.c.receipt_hash,
        delivery_bindings.c.operation_id,
        delivery_bindings.c.approval_revision,
        delivery_bindings.c.contract_hash,
        delivery_bindings.c.record_hash,
    ],
}


def read_tables(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as connection:
        tables = {
            name: sorted(tuple(row) for row in connection.execute(select(*columns)))
            for name, columns in _COLUMNS.items()
        }
        connection.rollback()
    return tables


# A host application's table, written by every `write=` of the *_atomically calls.
host_metadata = MetaData()
host_writes = Table(
    "model_host_writes",
    host_metadata,
    Column("id", Integer, primary_key=True),
    Column("call", Text, nullable=False),
)


def clear_tables(engine: Engine) -> None:
    host_metadata.create_all(engine)
    with engine.begin() as connection:
        for table in (operations, delivery_bindings, events, runs, host_writes):
            connection.execute(delete(table))


def host_write(label: str) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        session.execute(host_writes.insert().values(call=label))

    return write


# -- the state machine ------------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ops(kind: str, count: int) -> st.SearchStrategy[str]:
    """Operation ids: two shared by every kind (replays and kind conflicts), the rest the
    kind's own (so runs progress instead of replaying forever)."""
    return st.integers(0, count - 1).map(lambda i: f"op-{i}" if i < 2 else f"{kind}-{i}")


CHANGES = ["alpha", "beta", "gamma"]
KEYS = [sha(f"provisional-{i}") for i in range(3)]
RECEIPTS = [sha("receipt-a"), sha("receipt-b")]
PROOFS: list[dict[str, Any] | None] = [
    None,
    {"revision": 1, "contractHash": sha("contract-1"), "recordHash": sha("record-1")},
    {"revision": 2, "contractHash": sha("contract-2"), "recordHash": sha("record-1")},
]
CODES = [None, "", "awaiting-review", "x' WHERE 1=1; --"]
TTLS = [1, 50, 1_000, 60_000]
JUMPS = [0, 1, 50, 1_000, 60_000, 60_001]  # TTLs exactly: the expiry boundary (expires == now)
OUTCOMES = [
    {"ok": True},
    {"step": 3, "note": "'; DROP TABLE runs; --", "nested": {"b": [1, 2], "a": None}},
]
# no lease two times in three
LEASE_CHOICE = st.one_of(st.none(), st.none(), st.integers(0, 50))
MISSING_RUN = "00000000-0000-4000-8000-000000000000"
# the bind rules' run choice for the empty run id (only the batch call refuses it up front)
EMPTY_RUN_CHOICE = 10


@dataclass
class Handle:
    """A lease the test holds: what the store returned, and the JSON the model knows."""

    lease: OperationLease
    forged: bool = False

    def presented(self) -> OperationLease:
        if self.forged:
            return self.lease.model_copy(update={"token": "forged-token"})
        return self.lease


Outcome = tuple[str, Any]  # ("ok", value) | ("error", code)


class StoreMachine(RuleBasedStateMachine):
    """Every call goes to the store and to the model; outcomes and tables must agree."""

    url: str = ""
    reader: Engine | None = None

    def __init__(self) -> None:
        super().__init__()
        assert self.reader is not None
        clear_tables(self.reader)
        self.clock = FakeClock()
        self.store = RunStore(self.url, root_hash=ROOT, clock=self.clock)
        self.model = Model()
        self.run_ids: list[str] = []
        self.handles: list[Handle] = []
        self.tokens: set[str] = set()
        self.seen_events: dict[tuple[str, int], str] = {}
        self.calls: dict[str, int] = {}
        self.outcomes: dict[tuple[str, str], int] = {}
        self.history: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.advances = 0
        self.host_calls = 0  # numbers the *_atomically calls (the host rows' labels)
        self.expected_host_writes: list[str] = []

    def teardown(self) -> None:
        self.store.close()

    # -- plumbing -----------------------------------------------------------------------

    def _pick_run(self, index: int) -> str:
        if index == 9 or not self.run_ids:
            return MISSING_RUN
        return self.run_ids[index % len(self.run_ids)]

    def _handle(self, index: int | None, run_id: str | None = None) -> Handle | None:
        """The lease at `index`; for a run, one of that run's own leases when it has any
        (a lease of another run, or a forged one, is the other half of the choices)."""
        if index is None or not self.handles:
            return None
        own = [h for h in self.handles if h.lease.run_id == run_id and not h.forged]
        if own and index % 2 == 0:
            return own[(index // 2) % len(own)]
        return self.handles[index % len(self.handles)]

    @staticmethod
    def _lease_json(handle: Handle | None) -> dict[str, Any] | None:
        if handle is None:
            return None
        return handle.presented().model_dump(mode="json", by_alias=True)

    @staticmethod
    def _store(call: Callable[[], Any]) -> Outcome:
        try:
            return ("ok", call())
        except CadenceStoreError as error:
            assert isinstance(error.code, str) and error.code
            return ("error", error.code)

    def _model(self, call: Callable[[], Any]) -> Outcome:
        saved = copy.deepcopy(self.model)
        try:
            return ("ok", call())
        except ModelError as error:
            self.model = saved  # a failed call changes nothing
            return ("error", error.code)

    def _compare(self, name: str, got: Outcome, want: Outcome, kind: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        key = (name, "ok" if got[0] == "ok" else str(got[1]))
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        where = f"{name}: store {got!r} vs model {want!r}"
        if got[0] != want[0] or (got[0] == "error" and got[1] != want[1]):
            raise AssertionError(where)
        if got[0] == "error":
            return
        value, expected = got[1], want[1]
        if kind == "projection":
            assert value.to_json() == expected, where  # byte for byte, key order included
            dumped = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            assert dumped == json.loads(expected), where
        elif kind == "lease":
            dumped = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            if expected["token"] == NEW:
                assert dumped["token"] not in self.tokens, f"{where}: a token was reused"
                expected = {**expected, "token": dumped["token"]}
                self._learn_token(dumped["token"])
            assert dumped == expected, where
        elif kind == "status":
            dumped = (
                None
                if value is None
                else value.model_dump(mode="json", by_alias=True, exclude_none=True)
            )
            assert dumped == expected, where
        else:
            assert value == expected, where

    def _learn_token(self, token: str) -> None:
        self.tokens.add(token)
        for row in self.model.ops.values():
            if row.token == NEW:
                row.token = token

    def _event_count(self) -> int:
        return sum(len(run.events) for run in self.model.runs.values())

    def _atomic_label(self, name: str) -> str:
        self.host_calls += 1
        return f"{self.host_calls}:{name}"

    def _expect_host_write(self, label: str, before: int, want: Outcome) -> None:
        """The model appended an event: the call's write must have run once (else never)."""
        if want[0] == "ok" and self._event_count() > before:
            self.expected_host_writes.append(label)

    def _remember(self, call: Callable[..., None], *args: Any) -> None:
        self.history.append((call, args))

    # -- the journal calls (resolved arguments; `repeat_a_call` re-issues them) ---------

    def _start_run(
        self,
        stage: str,
        op: str,
        change: str | None,
        key: str | None,
        aliases: list[str] | None,
    ) -> None:
        got = self._store(
            lambda: self.store.start_run(
                stage,
                operation_id=op,
                change=change,
                provisional_key=key,
                provisional_aliases=aliases,
            )
        )

        def new_id() -> str:
            assert got[0] == "ok", f"the model made a run, the store said {got}"
            run_id = str(got[1].run_id)
            assert run_id not in self.model.runs, "a new run reused an existing run id"
            self.run_ids.append(run_id)
            return run_id

        want = self._model(lambda: self.model.start_run(stage, op, change, key, aliases, new_id))
        self._compare("start_run", got, want, "projection")

    def _bind_change(self, run_id: str, change: str, op: str) -> None:
        got = self._store(lambda: self.store.bind_change(run_id, change, operation_id=op))
        want = self._model(lambda: self.model.bind_change(run_id, change, op))
        self._compare("bind_change", got, want, "projection")

    def _bind_delivery(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt: str,
        proof: dict[str, Any] | None,
        op: str,
        handle: Handle | None,
        how: str,
    ) -> None:
        presented = handle.presented() if handle else None
        proof_arg = (
            None
            if proof is None
            else {
                "revision": proof["revision"],
                "contract_hash": proof["contractHash"],
                "record_hash": proof["recordHash"],
            }
        )
        other_gate = "gate-b" if gate == "gate-a" else "gate-a"
        other_receipt = RECEIPTS[1] if receipt == RECEIPTS[0] else RECEIPTS[0]
        label = self._atomic_label(f"bind-{how}-{op}")

        def call() -> Any:
            if how == "plain":
                return self.store.bind_delivery(
                    run_id,
                    gate,
                    revision,
                    receipt,
                    operation_id=op,
                    approval_proof=proof_arg,
                    lease=presented,
                )
            if how == "atomically":
                return self.store.bind_delivery_atomically(
                    run_id,
                    gate,
                    revision,
                    receipt,
                    operation_id=op,
                    approval_proof=proof_arg,
                    lease=presented,
                    write=host_write(label),
                )
            # a batch: this binding, then the next revision of the other gate
            items = [
                BindDelivery(
                    run_id=run_id,
                    gate=gate,
                    revision=revision,
                    receipt_hash=receipt,
                    operation_id=op,
                    approval_proof=proof_arg,
                    lease=presented,
                ),
                {
                    "runId": run_id,
                    "gate": other_gate,
                    "revision": revision + 1,
                    "receiptHash": other_receipt,
                    "operationId": f"{op}-next",
                    "lease": None if presented is None else presented.to_dict(),
                },
            ]
            return self.store.bind_deliveries_atomically(items, write=host_write(label))

        got = self._store(call)
        lease_json, now = self._lease_json(handle), self.clock.now

        def model_call() -> str:
            if how == "batch" and not run_id:
                raise ModelError("delivery-binding-write-invalid")  # the batch's `!runId`
            result = self.model.bind_delivery(
                run_id, gate, revision, receipt, op, proof, lease_json, now
            )
            if how == "batch":
                result = self.model.bind_delivery(
                    run_id,
                    other_gate,
                    revision + 1,
                    other_receipt,
                    f"{op}-next",
                    None,
                    lease_json,
                    now,
                )
            return result

        before = self._event_count()
        want = self._model(model_call)
        if how != "plain":
            self._expect_host_write(label, before, want)
        self._compare(f"bind_delivery-{how}", got, want, "projection")

    def _transition(
        self,
        run_id: str,
        to: str,
        op: str,
        code: str | None,
        handle: Handle | None,
        atomically: bool,
    ) -> None:
        presented = handle.presented() if handle else None
        label = self._atomic_label(f"transition-{op}")
        if atomically:
            got = self._store(
                lambda: self.store.transition_atomically(
                    run_id,
                    to,
                    operation_id=op,
                    code=code,
                    lease=presented,
                    write=host_write(label),
                )
            )
        else:
            got = self._store(
                lambda: self.store.transition(
                    run_id, to, operation_id=op, code=code, lease=presented
                )
            )
        lease_json, now = self._lease_json(handle), self.clock.now
        before = self._event_count()
        want = self._model(lambda: self.model.transition(run_id, to, op, code, lease_json, now))
        if atomically:
            self._expect_host_write(label, before, want)
        self._compare("transition", got, want, "projection")

    def _acquire_lease(
        self, run_id: str, op: str, ttl: int, preempt: bool, exclusive: bool
    ) -> None:
        got = self._store(
            lambda: self.store.acquire_lease(run_id, op, ttl, preempt=preempt, exclusive=exclusive)
        )
        now = self.clock.now
        want = self._model(
            lambda: self.model.acquire_lease(run_id, op, ttl, preempt, exclusive, now)
        )
        self._compare("acquire_lease", got, want, "lease")
        if got[0] == "ok":
            self.handles.append(Handle(got[1]))
            self.handles.append(Handle(got[1], forged=True))

    # -- rules --------------------------------------------------------------------------

    @initialize()
    def two_runs_with_leases(self) -> None:
        self._start_run("abel-design", "start-init-1", None, KEYS[0], None)
        self._start_run("abel-implement", "start-init-2", CHANGES[0], None, None)
        self._acquire_lease(self.run_ids[0], "lease-init-1", 60_000, False, False)
        self._acquire_lease(self.run_ids[1], "lease-init-2", 1_000, False, False)

    @rule(
        mode=st.sampled_from(
            ["design-key", "design-key", "design-change", "implement", "implement", "bad-key"]
        ),
        name=st.integers(0, len(CHANGES) - 1),
        aliases=st.lists(st.integers(0, len(KEYS) - 1), max_size=2),
        op=ops("start", 8),
    )
    def start_run(self, mode: str, name: int, aliases: list[int], op: str) -> None:
        stage = "abel-design" if mode.startswith("design") else "abel-implement"
        keyed = mode in ("design-key", "bad-key")
        args = (
            stage,
            op,
            None if keyed else CHANGES[name],
            KEYS[name] if keyed else None,
            [KEYS[a] for a in aliases] if keyed and aliases else None,
        )
        self._remember(self._start_run, *args)
        self._start_run(*args)

    @rule(run=st.integers(0, 9), change=st.integers(0, len(CHANGES) - 1), op=ops("change", 6))
    def bind_change(self, run: int, change: int, op: str) -> None:
        args = (self._pick_run(run), CHANGES[change], op)
        self._remember(self._bind_change, *args)
        self._bind_change(*args)

    def _bind(
        self,
        how: str,
        run: int,
        gate: str,
        revision: int,
        receipt: int,
        proof: int,
        op: str,
        lease: int | None,
    ) -> None:
        run_id = "" if run == EMPTY_RUN_CHOICE else self._pick_run(run)
        handle = self._handle(lease, run_id)
        args = (run_id, gate, revision, RECEIPTS[receipt], PROOFS[proof], op, handle, how)
        self._remember(self._bind_delivery, *args)
        self._bind_delivery(*args)

    @rule(
        run=st.integers(0, EMPTY_RUN_CHOICE),
        gate=st.sampled_from(["gate-a", "gate-b"]),
        revision=st.integers(1, 3),
        receipt=st.integers(0, 1),
        proof=st.integers(0, 2),
        op=ops("bind", 10),
        lease=LEASE_CHOICE,
    )
    def bind_delivery(self, **arguments: Any) -> None:
        self._bind("plain", **arguments)

    @rule(
        run=st.integers(0, EMPTY_RUN_CHOICE),
        gate=st.sampled_from(["gate-a", "gate-b"]),
        revision=st.integers(1, 3),
        receipt=st.integers(0, 1),
        proof=st.integers(0, 2),
        op=ops("bind", 10),
        lease=LEASE_CHOICE,
    )
    def bind_delivery_atomically(self, **arguments: Any) -> None:
        self._bind("atomically", **arguments)

    @rule(
        run=st.integers(0, EMPTY_RUN_CHOICE),
        gate=st.sampled_from(["gate-a", "gate-b"]),
        revision=st.integers(1, 3),
        receipt=st.integers(0, 1),
        proof=st.integers(0, 2),
        op=ops("bind", 10),
        lease=LEASE_CHOICE,
    )
    def bind_deliveries_atomically(self, **arguments: Any) -> None:
        self._bind("batch", **arguments)

    @rule(
        run=st.integers(0, 9),
        legal=st.booleans(),
        pick=st.integers(0, len(STATES)),
        code=st.sampled_from(CODES),
        op=ops("move", 16),
        lease=LEASE_CHOICE,
        atomically=st.booleans(),
    )
    def transition(
        self,
        run: int,
        legal: bool,
        pick: int,
        code: str | None,
        op: str,
        lease: int | None,
        atomically: bool,
    ) -> None:
        run_id = self._pick_run(run)
        current = self.model.runs.get(run_id)
        moves = MOVES[current.doc["state"]] if current else ()
        if legal and moves:
            to = moves[pick % len(moves)]
        else:
            to = STATES[pick] if pick < len(STATES) else "no-such-state"
        args = (run_id, to, op, code, self._handle(lease, run_id), atomically)
        self._remember(self._transition, *args)
        self._transition(*args)

    @rule(run=st.integers(0, 8), pick=st.integers(0, 10))
    def advance_run(self, run: int, pick: int) -> None:
        """A legal move under a fresh operation id, so that runs travel the state table."""
        run_id = self._pick_run(run)
        current = self.model.runs.get(run_id)
        moves = MOVES[current.doc["state"]] if current else ()
        if moves:
            self.advances += 1
            args = (run_id, moves[pick % len(moves)], f"advance-{self.advances}", None, None)
            self._remember(self._transition, *args, False)
            self._transition(*args, False)

    @precondition(lambda self: self.history)
    @rule(pick=st.integers(0, 100))
    def repeat_a_call(self, pick: int) -> None:
        """The same call again, exactly: a replay (or, if things moved on, a conflict)."""
        call, args = self.history[-1 - pick % len(self.history)]
        call(*args)

    @rule(
        run=st.integers(0, 9),
        op=ops("lease", 6),
        ttl=st.sampled_from(TTLS),
        preempt=st.booleans(),
        exclusive=st.booleans(),
    )
    def acquire_lease(self, run: int, op: str, ttl: int, preempt: bool, exclusive: bool) -> None:
        self._acquire_lease(self._pick_run(run), op, ttl, preempt, exclusive)

    @precondition(lambda self: self.handles)
    @rule(lease=st.integers(0, 50), ttl=st.sampled_from(TTLS))
    def renew_lease(self, lease: int, ttl: int) -> None:
        handle = self._handle(lease)
        assert handle is not None
        got = self._store(lambda: self.store.renew_lease(handle.presented(), ttl))
        lease_json, now = self._lease_json(handle), self.clock.now
        assert lease_json is not None
        want = self._model(lambda: self.model.renew_lease(lease_json, ttl, now))
        self._compare("renew_lease", got, want, "lease")
        if got[0] == "ok":
            self.handles.append(Handle(got[1]))

    @precondition(lambda self: self.handles)
    @rule(lease=st.integers(0, 50))
    def assert_lease(self, lease: int) -> None:
        handle = self._handle(lease)
        assert handle is not None
        got = self._store(lambda: self.store.assert_lease(handle.presented()))
        lease_json, now = self._lease_json(handle), self.clock.now
        assert lease_json is not None
        want = self._model(lambda: self.model.assert_lease(lease_json, now))
        self._compare("assert_lease", got, want, "value")

    @precondition(lambda self: self.handles)
    @rule(lease=st.integers(0, 50), outcome=st.integers(0, len(OUTCOMES) - 1))
    def commit_lease(self, lease: int, outcome: int) -> None:
        handle = self._handle(lease)
        assert handle is not None
        got = self._store(lambda: self.store.commit_lease(handle.presented(), OUTCOMES[outcome]))
        lease_json, now = self._lease_json(handle), self.clock.now
        assert lease_json is not None
        want = self._model(lambda: self.model.commit_lease(lease_json, OUTCOMES[outcome], now))
        self._compare("commit_lease", got, want, "value")

    @precondition(lambda self: self.handles)
    @rule(lease=st.integers(0, 50))
    def interrupt_lease(self, lease: int) -> None:
        handle = self._handle(lease)
        assert handle is not None
        got = self._store(lambda: self.store.interrupt_lease(handle.presented()))
        lease_json, now = self._lease_json(handle), self.clock.now
        assert lease_json is not None
        want = self._model(lambda: self.model.interrupt_lease(lease_json, now))
        self._compare("interrupt_lease", got, want, "value")

    @rule(run=st.integers(0, 9), pick=st.integers(0, 40))
    def inspect_operation(self, run: int, pick: int) -> None:
        run_id = self._pick_run(run)
        known = sorted(op_id for (owner, op_id) in self.model.ops if owner == run_id)
        op = known[pick % len(known)] if known and pick < 36 else "never-used"
        got = self._store(lambda: self.store.inspect_operation(run_id, op))
        now = self.clock.now
        want = self._model(lambda: self.model.inspect_operation(run_id, op, now))
        self._compare("inspect_operation", got, want, "status")

    @rule()
    def recover_expired_leases(self) -> None:
        got = self._store(self.store.recover_expired_leases)
        now = self.clock.now
        want = self._model(lambda: self.model.recover_expired_leases(now))
        self._compare("recover_expired_leases", got, want, "value")

    @rule(jump=st.sampled_from(JUMPS))
    def clock_jumps_forward(self, jump: int) -> None:
        self.clock.now += jump

    @rule(pick=st.integers(0, 20), past=st.booleans())
    def clock_jumps_to_a_lease_expiry(self, pick: int, past: bool) -> None:
        """Exactly onto a live lease's expiry (still live) or one millisecond past it."""
        expiries = sorted(
            row.expires
            for row in self.model.ops.values()
            if row.state == "running" and row.expires is not None and row.expires >= self.clock.now
        )
        if expiries:
            self.clock.now = expiries[pick % len(expiries)] + (1 if past else 0)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def tables_are_the_models(self) -> None:
        assert self.reader is not None
        stored = read_tables(self.reader)
        expected = self.model.tables()
        for name in expected:
            assert stored[name] == expected[name], f"table {name} differs from the model"
        # an event, once seen, never changes (and never disappears)
        current = {(row[0], row[1]): row[5] for row in stored["events"]}
        for key, digest in self.seen_events.items():
            assert current.get(key) == digest, f"event {key} changed or vanished"
        self.seen_events.update(current)

    @invariant()
    def host_writes_happen_once_per_applied_operation(self) -> None:
        assert self.reader is not None
        with self.reader.connect() as connection:
            written = [row[0] for row in connection.execute(select(host_writes.c.call))]
            connection.rollback()
        assert sorted(written) == sorted(self.expected_host_writes), (
            "host writes differ from the calls that appended: "
            f"{sorted(set(written) ^ set(self.expected_host_writes))}"
        )

    @invariant()
    def every_chain_verifies(self) -> None:
        for run_id in self.run_ids:
            verified = self.store.verify_integrity(run_id).to_json()
            assert self.store.rebuild_projection(run_id).to_json() == verified
            assert self.store.status(run_id).to_json() == verified
            assert verified == js(self.model.runs[run_id].doc)


@dataclass
class Campaign:
    """What a whole hypothesis run did: calls made, and their outcomes."""

    machines: list[StoreMachine] = field(default_factory=list)

    def calls(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for machine in self.machines:
            for name, count in machine.calls.items():
                totals[name] = totals.get(name, 0) + count
        return totals

    def outcomes(self) -> dict[tuple[str, str], int]:
        totals: dict[tuple[str, str], int] = {}
        for machine in self.machines:
            for key, count in machine.outcomes.items():
                totals[key] = totals.get(key, 0) + count
        return totals


def _run(url: str, machine_settings: settings) -> Campaign:
    cadence_store.upgrade(url)
    reader = create_engine(url)
    campaign = Campaign()

    class Machine(StoreMachine):
        pass

    Machine.url = url
    Machine.reader = reader

    def factory() -> Machine:
        machine = Machine()
        campaign.machines.append(machine)
        return machine

    try:
        run_state_machine_as_test(factory, settings=machine_settings)  # type: ignore[arg-type]
    finally:
        reader.dispose()
    return campaign


BOUNDED = settings(
    max_examples=25,
    stateful_step_count=30,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
CAMPAIGN = settings(
    max_examples=200,
    stateful_step_count=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _every_call_was_made(campaign: Campaign) -> None:
    totals = campaign.calls()
    expected = {
        "start_run",
        "bind_change",
        "bind_delivery-plain",
        "bind_delivery-atomically",
        "bind_delivery-batch",
        "transition",
        "acquire_lease",
        "renew_lease",
        "assert_lease",
        "commit_lease",
        "interrupt_lease",
        "inspect_operation",
        "recover_expired_leases",
    }
    assert expected <= set(totals), sorted(expected - set(totals))


@pytest.mark.campaign
class TestModelSQLite:
    def test_store_agrees_with_the_model(self, sqlite_database_url: str) -> None:
        _every_call_was_made(_run(sqlite_database_url, BOUNDED))

    @pytest.mark.slow
    def test_store_agrees_with_the_model_long_campaign(self, sqlite_database_url: str) -> None:
        _every_call_was_made(_run(sqlite_database_url, CAMPAIGN))


@pytest.mark.postgres
@pytest.mark.campaign
class TestModelPostgreSQL:
    def test_store_agrees_with_the_model(self, pg_database_url: str) -> None:
        _every_call_was_made(_run(pg_database_url, BOUNDED))

    @pytest.mark.slow
    def test_store_agrees_with_the_model_long_campaign(self, pg_database_url: str) -> None:
        _every_call_was_made(_run(pg_database_url, CAMPAIGN))


# -- every cell of the state table, store vs model (too sparse for random walks) ------------


def _paths_from_created() -> dict[str, list[str]]:
    paths: dict[str, list[str]] = {"created": []}
    frontier = ["created"]
    while frontier:
        state = frontier.pop(0)
        for target in MOVES[state]:
            if target not in paths:
                paths[target] = [*paths[state], target]
                frontier.append(target)
    return paths


def test_every_cell_of_the_state_table_agrees_with_the_model(database_url: str) -> None:
    """All 18 x 19 (state, target) pairs, the unknown target included: same outcome,
    same projection bytes, nothing written on a refusal; every run still verifies."""
    cadence_store.upgrade(database_url)
    reader = create_engine(database_url)
    paths = _paths_from_created()
    assert set(paths) == set(STATES)
    counter = iter(range(1_000_000))
    checked = 0
    try:
        with RunStore(database_url, root_hash=ROOT, clock=FakeClock()) as store:
            model = Model()

            def run_at(state: str) -> str:
                n = next(counter)
                created = store.start_run(
                    "abel-implement", change=f"cell-{n}", operation_id=f"cell-{n}"
                )
                model.start_run(
                    "abel-implement", f"cell-{n}", f"cell-{n}", None, None, lambda: created.run_id
                )
                for step, target in enumerate(paths[state]):
                    op = f"walk-{n}-{step}"
                    moved = store.transition(created.run_id, target, operation_id=op)
                    assert moved.to_json() == model.transition(
                        created.run_id, target, op, None, None, 0
                    )
                return created.run_id

            for state in STATES:
                refusals = run_at(state)  # shared by the targets that must be refused
                for target in (*STATES, "no-such-state"):
                    legal = target in MOVES[state]
                    run_id = run_at(state) if legal else refusals
                    op = f"cell-move-{next(counter)}"
                    code = "cell-code" if checked % 2 else None
                    before = read_tables(reader)
                    try:
                        got: Outcome = (
                            "ok",
                            store.transition(run_id, target, operation_id=op, code=code).to_json(),
                        )
                    except CadenceStoreError as error:
                        got = ("error", error.code)
                    try:
                        want: Outcome = (
                            "ok",
                            model.transition(run_id, target, op, code, None, 0),
                        )
                    except ModelError as error:
                        want = ("error", error.code)
                    assert got == want, (state, target)
                    assert (got[0] == "ok") == legal, (state, target)
                    if not legal:
                        assert read_tables(reader) == before, (state, target)
                    checked += 1
            assert read_tables(reader) == model.tables()
            for run_id in model.runs:
                assert store.verify_integrity(run_id).to_json() == js(model.runs[run_id].doc)
    finally:
        reader.dispose()
    assert checked == len(STATES) * (len(STATES) + 1)


# -- the model itself, on a few cadence 1.x facts -----------------------------------------------


def test_the_model_knows_the_cadence_1x_state_table() -> None:
    assert len(STATES) == 18
    assert sum(len(v) for v in MOVES.values()) == 78
    assert all(target in STATES for targets in MOVES.values() for target in targets)
    assert all(MOVES[state] == () for state in TERMINAL)


def test_the_model_hashes_like_the_golden_events() -> None:
    from pathlib import Path

    golden = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x"
    lines = (golden / "golden-events.jsonl").read_text(encoding="utf-8").splitlines()
    checked = 0
    for line in lines:
        event = json.loads(line)
        ours = json.dumps(
            {k: event[k] for k in ("sequence", "type", "payload", "priorHash")},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        plain = all(" " <= ch <= "~" for ch in ours)
        if not plain or any(isinstance(v, float) for v in _leaves(event["payload"])):
            continue  # the model only claims printable ASCII payloads and integers
        assert ours == event["canonical"], line
        digest = event_hash(event["sequence"], event["type"], event["payload"], event["priorHash"])
        assert digest == event["hash"], line
        checked += 1
    assert checked > 0


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value
