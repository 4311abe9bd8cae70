"""`JournalTransaction`: what journal calls need inside one transaction, in one place.

One object per transaction, opened one of three ways:

- `on_pooled`: RunStore's fast path, a pooled DB-API connection in a transaction the
  runner began and will end; no `Session`, no host code.
- `on_connection`: a unit of work's `Connection`. The `Session` for host rows is made on
  first use, joined to the same transaction and connected at once, so that a host's
  `begin_nested()` takes its SAVEPOINT before the next journal call.
- `on_session`: a host's `Session`; the host begins and commits, so nothing is kept
  between calls (the session outlives its transactions).

It holds the statements (one cursor for the transaction), the run heads locked so far,
and what it knows of its own state. A transaction that a unit of work owns can no longer
commit what it acknowledged after:

- a journal call failed after writing some of its rows (SQLite keeps a failed call's
  earlier statements);
- a statement failed on PostgreSQL (the server aborts the whole transaction, and the
  driver's COMMIT then rolls back without a word);
- SQLite rolled the transaction back by itself (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM,
  ...): the next statement would begin, and commit, a new one.

`assert_open()` refuses every further statement of such a transaction and its commit
with `TransactionAbortedError`: nothing of it is committed, never only a part.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.base import NestedTransaction
from sqlalchemy.orm import Session, SessionTransaction

from ..errors import StoreUnavailableError, TransactionAbortedError
from ..journal.documents import Document, parse_document
from ..storage.backends import Backend, backend_for
from ..storage.failures import is_database_error
from ..storage.feed_notifier import wake_followers
from ..storage.shape import assert_store_ready
from ..storage.statements import Statements
from ..telemetry_state import count_committed, note_appended


@dataclass(slots=True)
class RunHead:
    """A locked run row as this transaction left it."""

    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str
    _document: Document | None = None

    def document(self) -> Document:
        """The stored projection, parsed once (callers must not modify it)."""
        if self._document is None:
            self._document = parse_document(self.projection_json)
        return self._document


# a kept head, and the savepoint it was kept under (None: the transaction itself)
_KeptHead = tuple[RunHead, NestedTransaction | None]
_HEAD_OF_KEPT: Final = operator.itemgetter(0)


class JournalTransaction:
    """The statements, session, locked heads and state of one transaction."""

    __slots__ = (
        "_broken",
        "_connection",
        "_heads",
        "_known",
        "_host_session",
        "_owned",
        "_watching",
        "commit_pending",
        "uncounted",
        "wake_pending",
        "_raw",
        "_ready",
        "_session",
        "_session_factory",
        "_profile",
        "_statements",
        "schema",
    )

    def __init__(
        self,
        profile: Backend | None,
        schema: str | None,
        *,
        owned: bool,
        connection: Connection | None = None,
        session: Session | None = None,
        session_factory: Callable[[Connection], Session] | None = None,
        statements: Statements | None = None,
        raw: Any = None,
        ready: bool = False,
        known: dict[str, RunHead] | None = None,
    ) -> None:
        self._profile = profile
        self.schema = schema
        self._owned = owned
        self._connection = connection
        self._host_session = session
        self._session: Session | None = session
        self._session_factory = session_factory
        self._statements = statements
        self._raw = raw
        self._ready = ready
        # Only a transaction that lives and dies with its owner keeps heads: a host's
        # session outlives its transactions.
        self._heads: dict[str, _KeptHead] | None = {} if owned else None
        self._known = known
        self._broken: str | None = None
        self._watching = False  # a listener on the connection (`on_connection`)
        self.wake_pending = False  # events that followers must hear of once committed
        self.uncounted: dict[str, int] | None = None  # appends by method, counted at commit
        self.commit_pending = False  # `committed` has something to do

    # -- the three ways in -----------------------------------------------------------------

    @classmethod
    def on_pooled(
        cls,
        profile: Backend,
        raw: Any,
        statements: Statements,
        schema: str | None,
        known: dict[str, RunHead] | None = None,
    ) -> JournalTransaction:
        """The runner's own transaction on a pooled DB-API connection (store checked).
        `known`: the heads the store's earlier commits left runs at (`known_head`)."""
        return cls(
            profile,
            schema,
            owned=True,
            statements=statements,
            raw=raw,
            ready=True,
            known=known,
        )

    def begin_again(self) -> None:
        """The next transaction on an `on_pooled` transaction's connection (a store keeps
        its own between writes, and this object with it): nothing of the last one's
        heads, failure, appends or followers to wake is kept."""
        self._heads = {}
        self._broken = None
        self.wake_pending = self.commit_pending = False
        self.uncounted = None

    @classmethod
    def on_connection(
        cls,
        connection: Connection,
        schema: str | None,
        session_factory: Callable[[Connection], Session],
        *,
        host_statements: bool = True,
    ) -> JournalTransaction:
        """A unit of work's transaction (or a read snapshot), already begun, with the
        store checked, on `connection`. `host_statements`: host code runs statements in
        it; on SQLite one that would run after the engine rolled the transaction back is
        refused before it runs."""
        raw = connection.connection.dbapi_connection
        transaction = cls(
            backend_for(connection.dialect),
            schema,
            owned=True,
            connection=connection,
            session_factory=session_factory,
            raw=raw,
            ready=True,
        )
        if host_statements and transaction.profile.rolls_back_by_itself:
            event.listen(connection, "before_cursor_execute", transaction._before_host_statement)
            transaction._watching = True
        return transaction

    @classmethod
    def on_session(cls, session: Session, schema: str | None) -> JournalTransaction:
        """A host's session: its transactions are the host's to begin and end."""
        # the dialect is learnt at the first statement: asking now would begin the
        # session's transaction before its owner does
        return cls(None, schema, owned=False, session=session)

    # -- what a call uses ----------------------------------------------------------------

    @property
    def dialect_name(self) -> str | None:
        """The engine's name (`sqlite`, `postgresql`), known without beginning anything:
        None for a host session bound to nothing yet."""
        if self._profile is not None:
            return self._profile.name
        assert self._host_session is not None
        try:
            return backend_for(self._host_session.get_bind()).name
        except Exception:  # no bind (yet), or no engine cadence-store serves: nothing to name
            return None

    @property
    def profile(self) -> Backend:
        profile = self._profile
        if profile is None:
            profile = self._profile = backend_for(self._host_connection().dialect)
        return profile

    @property
    def session(self) -> Session:
        """The session for host rows (made on first use, in this transaction)."""
        if self._session is None:
            if self._session_factory is None or self._connection is None:
                raise StoreUnavailableError(
                    "unit-of-work-not-active", "this transaction serves no host session"
                )
            session = self._session_factory(self._connection)
            session.connection()  # joined to this transaction now
            # a begin_nested() takes its SAVEPOINT at once, not at the session's next
            # statement: the journal calls that follow it run on the same connection
            event.listen(session, "after_transaction_create", _savepoint_at_once)
            self._session = session
        return self._session

    @property
    def made_session(self) -> Session | None:
        """The session, if one was made (a unit of work flushes it before committing)."""
        return self._session

    def statements(self, *, write: bool) -> Statements:
        """The statements of this transaction; `write`: in a transaction fit for writing.

        On a host's SQLite session a transaction that has not touched the database yet is
        begun IMMEDIATE here (unless the engine already does so), so that a concurrent
        writer waits instead of failing the read-then-write halfway."""
        if self._connection is not None or self._broken is not None:
            self.assert_open()  # a unit of work's block may have broken it since
        statements = self._statements
        if statements is not None:
            return statements
        connection = self._host_connection() if self._connection is None else self._connection
        if not self._ready:
            # once per engine: a store not at head, or drifted from the models, is refused
            assert_store_ready(connection, self.schema)
            self._ready = True
        if write and self._connection is None and self.profile.begins_immediate:
            self.profile.lock_host_write(connection)
        statements = Statements(connection, self.schema)
        if self._owned:
            # a unit of work's connection and transaction are this object's for life
            self._statements = statements
        return statements

    def _host_connection(self) -> Connection:
        assert self._host_session is not None
        return self._host_session.connection()

    @property
    def writes(self) -> int:
        """Rows written so far by the journal's statements in this transaction."""
        return 0 if self._statements is None else self._statements.writes

    # -- run heads -----------------------------------------------------------------------

    def kept_head(self, run_id: str) -> RunHead | None:
        """The head this transaction left `run_id` at, unless a savepoint it was kept
        under has ended since (rolled back: the row is back as it was; released: kept
        again under the enclosing one on the next read)."""
        heads = self._heads
        if not heads:
            return None
        kept = heads.get(run_id)
        if kept is None:
            return None
        head, savepoint = kept
        if savepoint is not None and not savepoint.is_active:
            del heads[run_id]
            return None
        return head

    def keep_head(self, head: RunHead, *, appended: Backend | None = None) -> None:
        """Keep `head` for the rest of this transaction (a transaction that keeps none,
        a host session's, ignores it). `appended`: an event was appended, leaving its run
        at `head` (this transaction's profile): counted and followers woken once this
        transaction commits (`note_append`)."""
        heads = self._heads
        if heads is not None:
            connection = self._connection
            savepoint = None if connection is None else connection.get_nested_transaction()
            heads[head.run_id] = (head, savepoint)
        if appended is not None:
            self.note_append(appended)

    def forget_head(self, run_id: str) -> None:
        if self._heads is not None:
            self._heads.pop(run_id, None)

    def known_head(self, run_id: str) -> RunHead | None:
        """The head an earlier commit of this store left `run_id` at, if this transaction
        has not locked the run yet: not read under this transaction's lock, so a write
        from it must name the whole head (`append_statements.KNOWN_PROJECTION`)."""
        if self._known is None or (self._heads and run_id in self._heads):
            return None
        return self._known.get(run_id)

    def heads_left(self) -> list[RunHead]:
        """The heads this transaction left the runs it locked at (once committed, the
        runs' heads)."""
        kept = (self._heads or {}).values()
        if self._connection is None:  # no savepoints: every kept head (picked in C)
            return list(map(_HEAD_OF_KEPT, kept))
        return [head for head, savepoint in kept if savepoint is None or savepoint.is_active]

    # -- the feed ---------------------------------------------------------------------------

    def note_append(self, profile: Backend | None = None, count: int = 1) -> None:
        """`count` events were written: once this transaction commits, they are counted
        (`cadence_store.events.appended`; never if it rolls back) and followers are woken
        (PostgreSQL: `storage.feed_notifier`; SQLite's followers see the file change). A
        host's session does both from its `after_commit`. `profile`: this transaction's,
        where the caller has it at hand."""
        method = note_appended(count)
        session = self._host_session
        if session is not None and not self._owned:
            # one object serves all the session's transactions: nothing kept here
            wake = (profile or self.profile).notifies
            if wake or method is not None:
                _after_host_commit(session, method, count, wake=self.schema if wake else False)
            return
        if method is not None:
            uncounted = self.uncounted
            if uncounted is None:
                self.uncounted = {method: count}
            else:
                uncounted[method] = uncounted.get(method, 0) + count
            self.commit_pending = True
        if not self.wake_pending and (profile or self.profile).notifies:
            self.wake_pending = self.commit_pending = True

    def committed(self, engine: Engine) -> None:
        """After the owner's commit: count the events it appended, wake followers."""
        self.commit_pending = False
        uncounted, self.uncounted = self.uncounted, None
        if uncounted:
            count_committed(uncounted)
        if self.wake_pending:
            self.wake_pending = False
            wake_followers(engine, self.schema)

    # -- its own state ---------------------------------------------------------------------

    def note_failure(self, error: BaseException, *, wrote: bool) -> None:
        """A journal call failed: remember whether this transaction can still commit."""
        if not self._owned or self._broken is not None:
            return
        if wrote:
            self._broken = "a journal call failed after writing part of its rows"
        elif _from_database(error):
            state = self._driver_state()
            if state is not None:
                self._broken = state

    def assert_open(self) -> None:
        """Refuse to go on (or commit) once the transaction cannot keep what it did."""
        if self._broken is None:
            state = self._driver_state()
            if state is None:
                return
            self._broken = state
        raise TransactionAbortedError(
            "run-store-transaction-aborted",
            f"{self._broken}; nothing of this unit of work was committed",
        )

    def _driver_state(self) -> str | None:
        """What the driver says is wrong with this transaction, or None."""
        raw = self._raw
        return None if raw is None else self.profile.transaction_trouble(raw)

    def _before_host_statement(self, *_event: Any) -> None:
        # SQLite only: after an automatic rollback the driver would run the statement in
        # a new transaction (or in autocommit mode), which the unit of work would commit.
        self.assert_open()

    def close(self) -> None:
        """Detach from the connection (the owner closes it)."""
        connection = self._connection
        if connection is not None and self._watching:
            self._watching = False
            event.remove(connection, "before_cursor_execute", self._before_host_statement)


_COMMIT_PENDING: Final = "cadence_store.commit_pending"
_COMMIT_LISTENING: Final = "cadence_store.commit_listening"


class _HostCommitPending:
    """What a host session's transaction owes once it commits: appends to count, and
    the schemas whose followers are to be woken."""

    __slots__ = ("uncounted", "wake")

    def __init__(self) -> None:
        self.uncounted: dict[str, int] = {}
        self.wake: set[str | None] = set()


def _after_host_commit(
    session: Session, method: str | None, count: int, *, wake: str | None | bool
) -> None:
    """Count `count` appends of `method` and, unless `wake` is False, number the events
    appended in schema `wake` and wake its followers when `session` next commits (one
    listener a session); nothing if it rolls back."""
    info = session.info
    pending = info.get(_COMMIT_PENDING)
    if pending is None:
        pending = info[_COMMIT_PENDING] = _HostCommitPending()
    if method is not None:
        pending.uncounted[method] = pending.uncounted.get(method, 0) + count
    if wake is not False:
        pending.wake.add(wake if isinstance(wake, str) else None)
    if not info.get(_COMMIT_LISTENING):
        info[_COMMIT_LISTENING] = True
        event.listen(session, "after_commit", _on_host_commit)
        event.listen(session, "after_transaction_end", _forget_host_commit)


def _on_host_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released (SQLAlchemy calls `after_commit` for those too)
    pending = session.info.pop(_COMMIT_PENDING, None)
    if pending is None:
        return
    if pending.uncounted:
        count_committed(pending.uncounted)
    if pending.wake:
        bind = session.get_bind()
        engine = bind if isinstance(bind, Engine) else bind.engine
        for schema in pending.wake:
            wake_followers(engine, schema)


def _forget_host_commit(session: Session, transaction: SessionTransaction) -> None:
    # the whole transaction's end (after `after_commit`): rolled back, or done already
    if transaction.parent is None:
        session.info.pop(_COMMIT_PENDING, None)


def _savepoint_at_once(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        session.connection()


def _from_database(error: BaseException) -> bool:
    """A failure that came from a statement (a coded error carries it as its cause)."""
    cause = error.__cause__
    return is_database_error(error) or (cause is not None and is_database_error(cause))


__all__ = ["JournalTransaction", "RunHead"]
