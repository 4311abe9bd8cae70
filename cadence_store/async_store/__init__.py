"""The journal for asyncio host applications: `AsyncRunStore`, `AsyncRunRepository`,
`AsyncUnitOfWork` and `upgrade_async` (extra `async`: aiosqlite, greenlet).

One implementation of the rules: every call drives the synchronous `RunRepository` on an
`AsyncConnection` / `AsyncSession` through SQLAlchemy's `run_sync` (greenlet). Inside it the
async drivers' adapted connections (aiosqlite, psycopg's async mode) look like DB-API
connections, so the compiled hot path (`storage/statements.py`) runs unchanged and the event loop is
never
blocked: each driver round trip is awaited underneath. What is async-specific here is only
the orchestration: connections, transactions, the `write=` callbacks (which may be
coroutine functions) and PostgreSQL's whole-transaction retries, which wait with
`asyncio.sleep`.

Modules: `engine` (async drivers and engines), `repository` (`AsyncRunRepository`),
`unit_of_work` (`AsyncUnitOfWork`), `store` (`AsyncRunStore`), `schema` (`upgrade_async`).
`schema=` and the error boundary (`failures`) work as in the sync classes.
"""

from .engine import async_database_url, create_async_store_engine
from .repository import AsyncRunRepository
from .schema import upgrade_async
from .store import AsyncRunStore, AsyncWrite
from .unit_of_work import AsyncUnitOfWork

__all__ = [
    "AsyncRunRepository",
    "AsyncRunStore",
    "AsyncUnitOfWork",
    "AsyncWrite",
    "async_database_url",
    "create_async_store_engine",
    "upgrade_async",
]
