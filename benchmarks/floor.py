"""The raw DB-API floor: the same durable transition, hand-written on sqlite3 / psycopg.

`SqliteFloor` sends SQLite exactly the statements `RunStore.transition` sends (traced
with `sqlite3.Connection.set_trace_callback`): BEGIN IMMEDIATE, the run's head, the
guarded UPDATE of the run (compare-and-set on the head, only while the operation id has
no receipt, `updated_at` never earlier than before), the event INSERT stamped with the
run's `updated_at` and given the next journal feed position, the receipt INSERT naming
the event's sequence, COMMIT, with the same row contents, on the same schema and
indexes. It builds the event (sha256 of its canonical JSON) and the next projection, and
skips everything a library adds (validation, error codes, retries,
replay answers), so it is the lower bound to compare against.

`SqlitePooledFloor` does the same on a connection of a plain SQLAlchemy pool, checked
out for each call and given back, as `RunStore(engine)` on a host's engine must.

`SqliteReceiptFirstFloor` is the floor of the earlier rounds (read the receipt, then the
run; no times): one statement more and two columns fewer than the store, kept to show
what that difference is worth (`benchmarks/sqlite_gap.py`). `PostgresFloor` keeps that
shape (the store sends PostgreSQL one statement for all three writes).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Any

from cadence_store.journal import RunProjection, apply_event, hash_event, js_stringify
from cadence_store.journal.canonical import canonical_and_stringified
from cadence_store.journal.documents import built_projection
from cadence_store.journal.events import hash_canonical_event
from cadence_store.journal.validation import require_transition_input
from cadence_store.journal.vocabulary import STATE_TRANSITIONED as TRANSITIONED


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _event(
    run_id: str, operation_id: str, document: dict[str, Any], to: str, code: str
) -> tuple[Any, ...]:
    """The event after the projection `document` and the texts the floor stores:
    (sequence, payload's JSON, prior hash, event hash, next projection, its JSON)."""
    del operation_id  # the floor checks no input
    sequence = document["sequence"] + 1
    payload = {"from": document["state"], "to": to, "code": code}
    prior = document["eventHash"]
    digest = hashlib.sha256(
        _canonical(
            {
                "sequence": sequence,
                "type": "state-transitioned",
                "payload": payload,
                "priorHash": prior,
            }
        ).encode()
    ).hexdigest()
    projection = {k: v for k, v in document.items() if k not in ("pauseCode", "terminal")}
    projection.update(state=to, sequence=sequence, eventHash=digest, pauseCode=code)
    payload_json = json.dumps(payload, separators=(",", ":"))
    outcome = json.dumps(projection, separators=(",", ":"), ensure_ascii=False)
    return sequence, payload_json, prior, digest, projection, outcome


def _contract_event(
    run_id: str, operation_id: str, document: dict[str, Any], to: str, code: str
) -> tuple[Any, ...]:
    """`_event` done by the journal's own rules (`cadence_store.journal`, which
    imports no SQLAlchemy): the input's rules, the payload's canonical JSON and its
    text, the hash, the projection folded by the state table and its JavaScript-exact
    JSON."""
    require_transition_input(run_id, operation_id, code, None)
    sequence = document["sequence"] + 1
    prior = document["eventHash"]
    payload = {"from": document["state"], "to": to, "code": code}
    canonical, payload_json = canonical_and_stringified(payload)
    digest = hash_canonical_event(sequence, TRANSITIONED, canonical, prior) or hash_event(
        sequence, TRANSITIONED, payload, prior
    )
    projection = apply_event(document, sequence, TRANSITIONED, payload, digest)
    return sequence, payload_json, prior, digest, projection, js_stringify(projection)


_HEAD_SQL = (
    "SELECT run_id, root_hash, stage, projection_json, sequence, event_hash"
    " FROM runs WHERE run_id = ?"
)
_ADVANCE_SQL = (
    "UPDATE runs SET state = ?, sequence = ?, event_hash = ?, delivery_revision = NULL,"
    " projection_json = ?, terminal_tombstone = NULL,"
    " updated_at = max(?, coalesce(updated_at, ?))"
    " WHERE run_id = ? AND sequence = ? AND event_hash = ?"
    " AND NOT EXISTS (SELECT * FROM operations WHERE run_id = ? AND operation_id = ?)"
)
_ADVANCE_KNOWN_SQL = _ADVANCE_SQL.replace(
    " AND NOT EXISTS", " AND projection_json = ? AND NOT EXISTS"
)
_EVENT_SQL = (
    "INSERT INTO events (run_id, sequence, type, payload_json, prior_hash, event_hash,"
    " recorded_at, feed_position) VALUES (?, ?, 'state-transitioned', ?, ?, ?,"
    " (SELECT updated_at FROM runs WHERE run_id = ?),"
    " (SELECT coalesce(max(feed_position), 0) + 1 FROM events))"
)
_RECEIPT_SQL = (
    "INSERT INTO operations (run_id, operation_id, kind, state, outcome_json, sequence)"
    " VALUES (?, ?, 'state-transitioned', 'committed', ?, ?)"
)


_PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA foreign_keys = ON",
    "PRAGMA busy_timeout = 10000",
)


def _connect_sqlite(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in _PRAGMAS:
        db.execute(pragma)
    return db


class SqliteFloor:
    """The store's statements on SQLite, hand-written.

    `remember_heads`: like `RunStore`, keep the head each commit left a run at and skip
    the head's SELECT next time, the UPDATE's compare-and-set also naming the stored
    projection (a head that moved is read again)."""

    next_event = staticmethod(_event)

    def __init__(self, path: str, *, remember_heads: bool = False) -> None:
        self.db = _connect_sqlite(path)
        self._heads: dict[str, tuple[str, int, str, dict[str, Any]]] | None = (
            {} if remember_heads else None
        )

    def transition(self, run_id: str, operation_id: str, to: str, code: str) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            known = None if self._heads is None else self._heads.pop(run_id, None)
            if known is None or not self._advance(run_id, operation_id, to, code, known):
                _, _, _, projection_json, sequence, event_hash = db.execute(
                    _HEAD_SQL, (run_id,)
                ).fetchone()
                head = (projection_json, sequence, event_hash, json.loads(projection_json))
                self._advance(run_id, operation_id, to, code, head, read=True)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            if self._heads is not None:
                self._heads.clear()
            raise

    def _advance(
        self,
        run_id: str,
        operation_id: str,
        to: str,
        code: str,
        head: tuple[str, int, str, dict[str, Any]],
        *,
        read: bool = False,
    ) -> bool:
        projection_json, head_sequence, head_hash, document = head
        sequence, payload_json, prior, digest, projection, outcome = self.next_event(
            run_id, operation_id, document, to, code
        )
        now = time.time_ns() // 1_000_000
        arguments = (to, sequence, digest, outcome, now, now, run_id, head_sequence, head_hash)
        if read:
            advanced = self.db.execute(_ADVANCE_SQL, (*arguments, run_id, operation_id))
        else:
            advanced = self.db.execute(
                _ADVANCE_KNOWN_SQL, (*arguments, projection_json, run_id, operation_id)
            )
        if advanced.rowcount != 1:
            return False
        self.db.execute(_EVENT_SQL, (run_id, sequence, payload_json, prior, digest, run_id))
        self.db.execute(_RECEIPT_SQL, (run_id, operation_id, outcome, sequence))
        if self._heads is not None:
            self._heads[run_id] = (outcome, sequence, digest, projection)
        return True

    def close(self) -> None:
        self.db.close()


class SqliteContractFloor(SqliteFloor):
    """`SqliteFloor` (heads remembered) with the contract's own work done as the store
    does it, by the journal's pure functions (`_contract_event`), and the `RunProjection`
    a transition returns built: none of the library's layers (the call's runner and
    retries, the transaction, the repository, error codes, telemetry). No layering of
    the contract goes below it: the store's distance to it is what its layers cost."""

    next_event = staticmethod(_contract_event)

    def __init__(self, path: str) -> None:
        super().__init__(path, remember_heads=True)
        self.returned: RunProjection | None = None

    def transition(self, run_id: str, operation_id: str, to: str, code: str) -> None:
        super().transition(run_id, operation_id, to, code)
        assert self._heads is not None
        self.returned = built_projection(self._heads[run_id][3])


class SqlitePooledFloor(SqliteFloor):
    """`SqliteFloor` on a connection checked out of a plain SQLAlchemy pool for each call,
    as a program using a host's `create_engine(url)` would: the floor of `RunStore(engine)`,
    which takes the host's connection for each call and gives it back (the pool's
    checkout, its reset-on-return rollback and its checkin are part of that work)."""

    def __init__(self, path: str) -> None:
        import sqlalchemy

        self._engine = sqlalchemy.create_engine(f"sqlite:///{path}")

        @sqlalchemy.event.listens_for(self._engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # BEGIN and COMMIT are the floor's
            for pragma in _PRAGMAS:
                dbapi_connection.execute(pragma)

        self._heads = {}

    def transition(self, run_id: str, operation_id: str, to: str, code: str) -> None:
        pooled = self._engine.raw_connection()
        try:
            self.db = pooled.dbapi_connection  # type: ignore[assignment]
            super().transition(run_id, operation_id, to, code)
        finally:
            pooled.close()

    def close(self) -> None:
        self._engine.dispose()


class SqliteReceiptFirstFloor:
    def __init__(self, path: str) -> None:
        self.db = _connect_sqlite(path)

    def transition(self, run_id: str, operation_id: str, to: str, code: str) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            receipt = db.execute(
                "SELECT kind, state, outcome_json FROM operations WHERE run_id = ? AND operation_id = ?",
                (run_id, operation_id),
            ).fetchone()
            if receipt is None:
                (projection_json,) = db.execute(
                    "SELECT projection_json FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                sequence, payload_json, prior, digest, _, outcome = _event(
                    run_id, operation_id, json.loads(projection_json), to, code
                )
                db.execute(
                    "INSERT INTO events (run_id, sequence, type, payload_json, prior_hash, event_hash)"
                    " VALUES (?, ?, 'state-transitioned', ?, ?, ?)",
                    (run_id, sequence, payload_json, prior, digest),
                )
                db.execute(
                    "UPDATE runs SET state = ?, sequence = ?, event_hash = ?, projection_json = ?"
                    " WHERE run_id = ?",
                    (to, sequence, digest, outcome, run_id),
                )
                db.execute(
                    "INSERT INTO operations (run_id, operation_id, kind, state, outcome_json)"
                    " VALUES (?, ?, 'state-transitioned', 'committed', ?)",
                    (run_id, operation_id, outcome),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.db.close()


class PostgresFloor:
    """`prepare_threshold`: psycopg's own (None: never prepare on the server, the store's
    default; 5, psycopg's default: prepare a statement after five uses)."""

    def __init__(self, url: str, *, prepare_threshold: int | None = 5) -> None:
        import psycopg

        self.db = psycopg.connect(url, prepare_threshold=prepare_threshold)

    def transition(self, run_id: str, operation_id: str, to: str, code: str) -> None:
        with self.db.transaction(), self.db.cursor() as cur:
            cur.execute(
                "SELECT kind, state, outcome_json FROM operations WHERE run_id = %s AND operation_id = %s",
                (run_id, operation_id),
            )
            if cur.fetchone() is None:
                cur.execute(
                    "SELECT projection_json FROM runs WHERE run_id = %s FOR UPDATE", (run_id,)
                )
                (projection_json,) = cur.fetchone()  # type: ignore[misc]
                sequence, payload_json, prior, digest, _, outcome = _event(
                    run_id, operation_id, json.loads(projection_json), to, code
                )
                cur.execute(
                    "INSERT INTO events (run_id, sequence, type, payload_json, prior_hash, event_hash)"
                    " VALUES (%s, %s, 'state-transitioned', %s, %s, %s)",
                    (run_id, sequence, payload_json, prior, digest),
                )
                cur.execute(
                    "UPDATE runs SET state = %s, sequence = %s, event_hash = %s, projection_json = %s"
                    " WHERE run_id = %s",
                    (to, sequence, digest, outcome, run_id),
                )
                cur.execute(
                    "INSERT INTO operations (run_id, operation_id, kind, state, outcome_json)"
                    " VALUES (%s, %s, 'state-transitioned', 'committed', %s)",
                    (run_id, operation_id, outcome),
                )

    def close(self) -> None:
        self.db.close()
