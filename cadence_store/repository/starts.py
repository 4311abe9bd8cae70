"""Runs found by their keys: starting a run (`start_run`) and giving a design run its
change (`bind_change`), under the advisory locks of the keys they look up (the lock
order's first step, `core.py`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import (
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    OperationConflictError,
)
from ..journal import (
    TERMINAL_STATES,
    ZERO_EVENT_HASH,
    RunProjection,
    apply_event,
    hash_event,
    js_stringify,
)
from ..journal.documents import (
    Document,
    built_projection,
    parse_document,
    projection_of,
)
from ..journal.run_ids import new_run_id
from ..journal.validation import (
    lookup_keys,
    require_change,
    require_operation_id,
    require_run_id,
    require_stage,
)
from ..journal.vocabulary import CHANGE_BOUND, COMMITTED, RUN_CREATED
from ..journal.vocabulary import DESIGN_STAGE as DESIGN
from ..storage.append_statements import INSERT_EVENT, INSERT_RUN
from ..storage.rows import RunProjectionRow
from ..storage.run_statements import (
    BIND_CHANGE,
    OWNER_OF_KEY,
    REKEY_RUN,
    RUN_BY_KEY,
    START_RECEIPTS,
)
from .appender import EventAppender
from .archived import refuse_archived_start
from .core import START, JournalAccess


class RunStarts:
    """`RunRepository`'s run starts and change bindings, in `access`'s transaction;
    `root_hash`: the root hash of the runs it starts (None: it starts none)."""

    __slots__ = ("_access", "_appender", "root_hash")

    def __init__(
        self, access: JournalAccess, appender: EventAppender, root_hash: str | None
    ) -> None:
        self._access = access
        self._appender = appender
        self.root_hash = root_hash

    def _require_root(self) -> str:
        if self.root_hash is None:
            raise InvalidInputError("invalid-root-hash")
        return self.root_hash

    def start_run(
        self,
        stage: str,
        operation_id: str,
        change: str | None,
        provisional_key: str | None,
        provisional_aliases: Iterable[str] | None,
    ) -> RunProjection:
        """Under the advisory locks of the run's keys and the operation id: a replay, the
        run its keys find, or a new run (its row and first event from one set of
        values)."""
        require_operation_id(operation_id)
        require_stage(stage)
        keys = lookup_keys(stage, change, provisional_key, provisional_aliases)
        primary_key, *_aliases = keys  # a new run row holds the first; all are looked up
        access = self._access
        root_hash = self._require_root()
        sql = access.write_statements()
        scope = f"{root_hash}\x00{stage}\x00"
        access.advisory_locks(sql, [scope + key for key in keys] + [f"{scope}op:{operation_id}"])

        receipts = [
            receipt
            for receipt in sql.all(
                START_RECEIPTS,
                root_hash=root_hash,
                stage=stage,
                operation_id=operation_id,
            )
            if receipt.lookup_key is not None  # a run of this root and stage
        ]
        if receipts:
            replay = next(
                (
                    r
                    for r in receipts
                    if r.kind == START
                    and r.state == COMMITTED
                    and r.outcome_json is not None
                    and r.lookup_key in keys
                ),
                None,
            )
            if len(receipts) != 1 or replay is None:
                raise OperationConflictError("operation-id-conflict")
            document = parse_document(replay.outcome_json, "operation-outcome-invalid")
            if document["runId"] != replay.run_id:
                raise JournalIntegrityError("operation-outcome-invalid")
            return projection_of(document)

        existing: RunProjectionRow | None = None
        for key in keys:
            candidate = sql.one(RUN_BY_KEY, root_hash=root_hash, stage=stage, lookup_key=key)
            if (
                candidate is not None
                and existing is not None
                and candidate.run_id != existing.run_id
            ):
                raise OperationConflictError("run-lookup-conflict")
            existing = existing or candidate
        if existing is not None:
            existing_id, existing_json = existing.run_id, existing.projection_json
            document = parse_document(existing_json)
            if stage == DESIGN and document.get("state") in TERMINAL_STATES:
                # a finished design run gives its key up to a new run
                sql.write(REKEY_RUN, run_id=existing_id, lookup_key=f"terminal:{existing_id}")
            else:
                access.record(
                    sql, existing_id, operation_id, START, existing_json, document.get("sequence")
                )
                return projection_of(document)

        # a fresh run: not the replay of an archived run's start, nor (unless its stage
        # gives a finished run's key up) a second run under an archived run's key
        refuse_archived_start(sql, root_hash, stage, operation_id, primary_key)
        run_id = new_run_id()
        payload: Document = {"runId": run_id, "rootHash": root_hash, "stage": stage}
        if change is not None:
            payload["change"] = change
        if provisional_key is not None:
            payload["provisionalKey"] = provisional_key
        event_hash = hash_event(1, RUN_CREATED, payload, ZERO_EVENT_HASH)
        created = apply_event(None, 1, RUN_CREATED, payload, event_hash)
        assert created is not None
        projection_json = js_stringify(created)
        # the run row and its first event, from one set of values (as an append's are)
        first = {
            "run_id": run_id,
            "root_hash": root_hash,
            "stage": stage,
            "lookup_key": primary_key,
            "change_name": change,
            "provisional_key": provisional_key,
            "state": created["state"],
            "sequence": 1,
            "type": RUN_CREATED,
            "payload_json": js_stringify(payload),
            "prior_hash": ZERO_EVENT_HASH,
            "event_hash": event_hash,
            "projection_json": projection_json,
            "now": access.append_now(),
        }
        sql.write(INSERT_RUN, **first)
        sql.write(INSERT_EVENT, **first)
        access.transaction.note_append()
        access.record(sql, run_id, operation_id, START, projection_json, 1)
        return built_projection(created)

    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        """Give the design run `run_id` its `change` (a `change-bound` event); returns the
        projection. A run that cannot take a change (an implement run, or one that has a
        change) is refused with `change-binding-not-allowed`."""
        require_operation_id(operation_id)
        require_change(change)
        require_run_id(run_id)
        access = self._access
        sql = access.write_statements()
        unlocked = access.head(sql, run_id, lock=False)
        if unlocked is not None:
            scope = f"{unlocked.root_hash}\x00{unlocked.stage}\x00"
            access.advisory_locks(sql, [scope + f"change:{change}"])
        replay = access.replay(sql, run_id, operation_id, CHANGE_BOUND)
        if replay is not None:
            return replay
        head = access.require_head(sql, run_id, lock=True)
        current = head.document()
        if current.get("stage") != DESIGN or not current.get("provisionalKey"):
            raise InvalidTransitionError("change-binding-not-allowed")
        owner = sql.one(
            OWNER_OF_KEY,
            root_hash=head.root_hash,
            stage=head.stage,
            lookup_key=f"change:{change}",
        )
        if owner is not None and owner.run_id != run_id:
            raise OperationConflictError("change-run-already-exists")
        sql.write(BIND_CHANGE, run_id=run_id, lookup_key=f"change:{change}", change_name=change)
        document, projection_json = self._appender.append(
            sql, head, CHANGE_BOUND, {"change": change}
        )
        access.record(
            sql, run_id, operation_id, CHANGE_BOUND, projection_json, document["sequence"]
        )
        return built_projection(document)
