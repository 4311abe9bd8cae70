"""The engines cadence-store serves, one backend each (`base.Backend`), and the lookup.

Everywhere else asks the backend for what differs (`backend.upsert_insert(table)`,
`backend.begin_write(connection)`, `backend.classify(error)`, ...), never the dialect's
name. Callers on a hot path look a backend up once and keep it (a transaction, a
statement set, a direct writer hold theirs): a lookup is one dict read.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.engine import URL

from ...errors import InvalidInputError
from .base import Backend
from .postgresql import PostgreSQLBackend
from .sqlite import SQLiteBackend

SQLITE: Final = SQLiteBackend()
POSTGRESQL: Final = PostgreSQLBackend()
# one line per engine
BACKENDS: Final[tuple[Backend, ...]] = (
    SQLITE,
    POSTGRESQL,
)
_BY_NAME: Final = {backend.name: backend for backend in BACKENDS}
UNSUPPORTED_ENGINE: Final = "unsupported-engine"


def backend_for(bind: Any) -> Backend:
    """The backend of a dialect, or of an engine or connection (sync or async, through
    its `dialect`); `unsupported-engine` for an engine cadence-store does not serve."""
    dialect = getattr(bind, "dialect", bind)
    backend = _BY_NAME.get(dialect.name)
    if backend is None:
        raise InvalidInputError(
            UNSUPPORTED_ENGINE,
            f"cadence-store runs on {' and '.join(sorted(_BY_NAME))}, not {dialect.name}",
        )
    return backend


def backend_named(name: str | None) -> Backend | None:
    """The backend of a dialect's name (None: no engine of that name is served)."""
    return None if name is None else _BY_NAME.get(name)


def backend_of_url(url: URL) -> Backend | None:
    """The backend a URL names (None: one cadence-store does not serve, left for
    `create_engine` to refuse)."""
    return _BY_NAME.get(url.get_backend_name())


__all__ = [
    "BACKENDS",
    "POSTGRESQL",
    "SQLITE",
    "UNSUPPORTED_ENGINE",
    "Backend",
    "backend_for",
    "backend_named",
    "backend_of_url",
]
