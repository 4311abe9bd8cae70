"""Every failure cadence-store raises: a `CadenceStoreError` with a stable `.code`.

Codes equal the cadence 1.x error messages so callers (and stores) written for
cadence 1.x keep working; the subclasses only group them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class CadenceStoreError(Exception):
    """Base of every cadence-store failure; `.code` is stable and machine-readable."""

    default_code: ClassVar[str] = "cadence-store-error"

    def __init__(self, code: str | None = None, detail: str | None = None) -> None:
        self.code: str = code or self.default_code
        self.detail = detail
        super().__init__(self.code if detail is None else f"{self.code}: {detail}")

    @property
    def retryable(self) -> bool:
        """Whether the same call, unchanged (same operation id), may succeed if retried: the
        store was busy, or could not be reached (a write's outcome is then unknown, and
        its retry replays it if it had committed). Every other failure is a verdict:
        retrying it unchanged fails the same way. README "Error codes" lists them all."""
        return self.code in RETRYABLE_CODES


# the codes whose call may simply be retried (`CadenceStoreError.retryable`)
RETRYABLE_CODES: frozenset[str] = frozenset(
    {"run-store-busy", "run-store-unavailable", "run-store-transaction-aborted"}
)


class InvalidInputError(CadenceStoreError):
    """A caller passed a value the contract rejects; nothing was written."""

    default_code = "invalid-input"


class RunNotFoundError(CadenceStoreError):
    """No run has the given id (`run-not-found`)."""

    default_code = "run-not-found"


class RunArchivedError(RunNotFoundError):
    """The run was archived (`RunStore.archive`): its rows are gone from the store and its
    archive file holds it (`run-archived`, naming the run). Raised by every call naming
    it and by every replay of one of its operation ids; never retryable. A subclass of
    `RunNotFoundError`, so that code written before retention still takes it for a
    missing run."""

    default_code = "run-archived"

    def __init__(
        self, code: str | None = None, detail: str | None = None, *, run_id: str | None = None
    ) -> None:
        super().__init__(code, detail)
        self.run_id = run_id


class OperationConflictError(CadenceStoreError):
    """The request contradicts what is already recorded (operation ids, keys, revisions)."""

    default_code = "operation-id-conflict"


class LeaseFencedError(CadenceStoreError):
    """The lease presented is not the live lease of its operation."""

    default_code = "lease-fenced"


class InvalidTransitionError(CadenceStoreError):
    """The run's state does not allow the requested move."""

    default_code = "invalid-run-transition"


class JournalIntegrityError(CadenceStoreError):
    """Stored events or projections do not verify."""

    default_code = "event-integrity-hash-chain"

    def __init__(
        self,
        code: str | None = None,
        detail: str | None = None,
        *,
        run_id: str | None = None,
        sequence: int | None = None,
        expected: Any = None,
        actual: Any = None,
        operation_id: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(code, detail)
        self.run_id = run_id
        self.sequence = sequence
        self.expected = expected
        self.actual = actual
        self.operation_id = operation_id  # set when an operations row does not verify
        # set when an event does not link into its chain: what differs ("sequence",
        # "priorHash", "hash"; "payload" when the payload itself is unusable)
        self.field = field


class StoreFormatError(CadenceStoreError):
    """The database is not a store this library can use; it was left untouched.

    Its recovery hint fits the situation: a dedicated run store (the embedded state-root
    store, or a file that holds nothing but cadence's tables) may be backed up and reset,
    as cadence 1.x advised; a host database that merely shares table names is told which
    tables clash and that nothing was changed — never to delete anything.
    """

    default_code = "run-store-reset-required"
    RESET_RECOVERY: ClassVar[dict[str, Any]] = {
        "action": "reset-private-run-store",
        "requiresBackup": True,
        "retryCommand": "status-or-start",
    }

    def __init__(
        self,
        database_path: str | None = None,
        detail: str | None = None,
        *,
        clashing_tables: Sequence[str] = (),
        schema: str | None = None,
    ) -> None:
        super().__init__(self.default_code, detail)
        self.database_path = database_path
        self.clashing_tables = tuple(clashing_tables)
        self.schema = schema

    @property
    def recovery(self) -> dict[str, Any]:
        if self.clashing_tables:
            return {
                "action": "keep-cadence-tables-apart",
                "requiresBackup": False,
                "clashingTables": list(self.clashing_tables),
            }
        return dict(self.RESET_RECOVERY)

    @property
    def hint(self) -> str:
        where = self.database_path or "the database"
        if self.clashing_tables:
            tables = ", ".join(self.clashing_tables)
            return (
                f"nothing was changed: {where} already has tables named like cadence-store's "
                f"own ({tables}) that are not a cadence run store; give cadence-store its own "
                "PostgreSQL schema (--schema NAME / schema=) or its own database"
            )
        return (
            f"back up {where}, then reset (remove) the private run store and retry "
            "the status or start command"
        )


class CheckpointError(JournalIntegrityError):
    """A signed checkpoint does not hold: its signature does not verify under the key
    (`checkpoint-signature-invalid`), the tree it names has another root or a proof does
    not lead to it (`checkpoint-mismatch`), or the store holds fewer leaves than it names
    (`checkpoint-rollback`). Tamper evidence, like the chain's own failures: `.run_id`,
    `.sequence`, `.expected` and `.actual` say what differs when it is known."""

    default_code = "checkpoint-mismatch"


class ArchiveInvalidError(JournalIntegrityError):
    """A file given as an archive is not one, or not whole: no archive header, a line that
    is not a run of it, a run whose leaves do not match its events, no trailer or a
    trailer whose counts differ (truncated), lines after the trailer (`archive-invalid`).
    Evidence that does not hold, like the chain's own failures."""

    default_code = "archive-invalid"


class MigrationError(CadenceStoreError):
    """An upgrade step failed; the whole upgrade was rolled back."""

    default_code = "run-store-migration-failed"


class SchemaOutOfDateError(CadenceStoreError):
    """The database is not at the head revision; the message names the command to run."""

    default_code = "run-store-upgrade-required"

    def __init__(
        self, detail: str | None = None, *, command: str = "cadence-store upgrade"
    ) -> None:
        super().__init__(self.default_code, detail)
        self.command = command


class StateRootError(CadenceStoreError):
    """The embedded store's state root cannot be used (symlinked, not owned, not a directory)."""

    default_code = "state-component-type"


class StoreBusyError(CadenceStoreError):
    """Other writers held the store for longer than the retry budget."""

    default_code = "run-store-busy"


class TransactionAbortedError(CadenceStoreError):
    """A unit of work's transaction can no longer commit what it did: a statement in it
    failed (PostgreSQL aborts the whole transaction), the engine rolled it back by itself
    (SQLite after SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, ...), or a journal call failed
    after writing part of its rows. Nothing of the unit of work was committed: re-run the
    whole block (operation ids that committed before replay)."""

    default_code = "run-store-transaction-aborted"


class StoreUnavailableError(CadenceStoreError):
    """The database cannot be read or written (disk full, closed, unreachable, a
    refused login, not a database, a statement refused, a privilege refused:
    `StorePermissionError`). Only `run-store-unavailable` itself is `retryable`."""

    default_code = "run-store-unavailable"


class StorePermissionError(StoreUnavailableError):
    """The database refused a privilege: a PostgreSQL role without a grant on
    cadence-store's tables (SQLSTATE 42501), a SQLite database that is read-only to this
    process. Nothing of the call was kept, and retrying it unchanged fails the same way
    until the grant (or the file) changes; `.hint` says what to grant."""

    default_code = "run-store-permission-denied"
    TABLES: ClassVar[str] = (
        "runs, events, operations, delivery_bindings, follower_positions, tree_tiles, "
        "checkpoints, kept_leaves, archived_runs, archived_operations"
    )

    def __init__(
        self,
        code: str | None = None,
        detail: str | None = None,
        *,
        engine: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(code, detail)
        self.engine = engine  # "postgresql", "sqlite", or None when unknown
        # what the engine's backend says a refused privilege means there
        self._hint = hint
        self.args = (f"{self} ({self.hint})",)

    @property
    def hint(self) -> str:
        if self._hint is not None:
            return self._hint
        return (
            "the database role lacks a privilege on cadence-store's tables: grant it "
            f"USAGE on their schema, SELECT, INSERT, UPDATE, DELETE on {self.TABLES} and "
            "SELECT on cadence_store_version (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
            "TABLES IN SCHEMA <schema> TO <role>); a role that only reads needs SELECT, and "
            "`upgrade` needs the tables' owner"
        )


class HostWriteError(CadenceStoreError):
    """The database refused a statement of the host's own code (a `write=` callback, or a
    host row flushed in a unit of work): a constraint, a missing host table. The whole
    transaction was rolled back and nothing of the call was kept; it was not re-run, and
    retrying it unchanged fails the same way. `.host_error` (also `__cause__`) is the
    driver's exception."""

    default_code = "run-store-host-write-failed"

    def __init__(self, host_error: BaseException, detail: str | None = None) -> None:
        super().__init__(self.default_code, detail)
        self.host_error = host_error


__all__ = [
    "ArchiveInvalidError",
    "CadenceStoreError",
    "CheckpointError",
    "HostWriteError",
    "InvalidInputError",
    "InvalidTransitionError",
    "JournalIntegrityError",
    "LeaseFencedError",
    "MigrationError",
    "OperationConflictError",
    "RunArchivedError",
    "RunNotFoundError",
    "SchemaOutOfDateError",
    "StateRootError",
    "StoreBusyError",
    "StoreFormatError",
    "StorePermissionError",
    "StoreUnavailableError",
    "TransactionAbortedError",
]
