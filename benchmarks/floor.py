"""The raw DB-API floor: the same durable transition, hand-written on sqlite3 / psycopg.

Same transaction shape as `RunStore.transition`: read the receipt, read (and lock) the
run row, build the event (sha256 of its canonical JSON) and the next projection, INSERT
the event, UPDATE the run, INSERT the receipt, COMMIT. It skips everything a library adds
(validation, error codes, retries, the unit of work), so it is the lower bound to compare
against.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _event(run_id: str, projection: dict[str, Any], to: str, code: str) -> tuple[Any, ...]:
    sequence = projection["sequence"] + 1
    payload = {"from": projection["state"], "to": to, "code": code}
    prior = projection["eventHash"]
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
    projection = {k: v for k, v in projection.items() if k not in ("pauseCode", "terminal")}
    projection.update(state=to, sequence=sequence, eventHash=digest, pauseCode=code)
    return sequence, payload, prior, digest, projection


class SqliteFloor:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA busy_timeout = 10000")

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
                sequence, payload, prior, digest, projection = _event(
                    run_id, json.loads(projection_json), to, code
                )
                outcome = json.dumps(projection, separators=(",", ":"), ensure_ascii=False)
                db.execute(
                    "INSERT INTO events (run_id, sequence, type, payload_json, prior_hash, event_hash)"
                    " VALUES (?, ?, 'state-transitioned', ?, ?, ?)",
                    (run_id, sequence, json.dumps(payload, separators=(",", ":")), prior, digest),
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
    def __init__(self, url: str) -> None:
        import psycopg

        self.db = psycopg.connect(url)

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
                sequence, payload, prior, digest, projection = _event(
                    run_id, json.loads(projection_json), to, code
                )
                outcome = json.dumps(projection, separators=(",", ":"), ensure_ascii=False)
                cur.execute(
                    "INSERT INTO events (run_id, sequence, type, payload_json, prior_hash, event_hash)"
                    " VALUES (%s, %s, 'state-transitioned', %s, %s, %s)",
                    (run_id, sequence, json.dumps(payload, separators=(",", ":")), prior, digest),
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
