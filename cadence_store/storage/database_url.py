"""Database URLs as operators write them, and the engine options they carry.

Accepted besides SQLAlchemy's own form:

- the libpq and pg_auto_failover multi-host form, `postgres://u@h1:p1,h2:p2/db?...` (what
  `pg_autoctl show uri` prints); it becomes SQLAlchemy's `?host=h1:p1&host=h2:p2`;
- the scheme `postgres://` or `postgresql://` without a driver: psycopg (the one
  PostgreSQL driver cadence-store installs).

Query parameters of a psycopg URL reach the driver with their types: `prepare_threshold`
(a number, or `none`) is psycopg's own and goes to `connect_args`; the libpq parameters
(`connect_timeout`, `sslmode`, `target_session_attrs`...) are checked. A SQLite URL's
`timeout` must be a number. Any bad value is `invalid-database-url`, before anything
connects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ..errors import InvalidInputError

# `scheme://[userinfo@]host:port,host:port[/database][?query]`
_MULTI_HOST: Final = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?:(?P<userinfo>[^@/?]*)@)?"
    r"(?P<hosts>[^/?@]*,[^/?@]*)(?P<path>/[^?]*)?(?:\?(?P<query>.*))?$"
)
_DRIVERLESS_POSTGRES: Final = re.compile(r"^(?:postgres|postgresql)://", re.IGNORECASE)

# psycopg's own connection arguments (the rest of a URL's query goes to libpq)
PSYCOPG_ARGUMENTS: Final = frozenset({"prepare_threshold"})
# consumed by SQLAlchemy itself
_SQLALCHEMY_QUERY: Final = frozenset({"plugin"})
_CHOICES: Final[Mapping[str, frozenset[str]]] = {
    "sslmode": frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}),
    "target_session_attrs": frozenset(
        {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}
    ),
    "load_balance_hosts": frozenset({"disable", "random"}),
    "gssencmode": frozenset({"disable", "prefer", "require"}),
}
_WHOLE_NUMBERS: Final = frozenset(
    {
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)


def _bad(detail: str) -> InvalidInputError:
    return InvalidInputError("invalid-database-url", detail)


def _rewrite(url: str) -> str:
    """The multi-host and driverless forms in SQLAlchemy's spelling."""
    if _DRIVERLESS_POSTGRES.match(url):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    match = _MULTI_HOST.match(url)
    if match is None:
        return url
    hosts = [host for host in match["hosts"].split(",") if host]
    if not hosts:
        raise _bad("a multi-host URL with no host")
    userinfo = f"{match['userinfo']}@" if match["userinfo"] is not None else ""
    query = "&".join([*(f"host={host}" for host in hosts), *filter(None, [match["query"]])])
    return f"{match['scheme']}://{userinfo}{match['path'] or '/'}?{query}"


def parse_url(url: str | URL) -> URL:
    """A SQLAlchemy URL, or `invalid-database-url`."""
    try:
        return make_url(_rewrite(url) if isinstance(url, str) else url)
    except (ArgumentError, ValueError, TypeError) as error:
        raise _bad(str(error)) from None


# The query parameters SQLAlchemy's SQLite dialects hand to `sqlite3.connect`, typed
# there with a bare `int()`/`float()`/bool parse: checked here so a bad one is coded.
_SQLITE_NUMBERS: Final = {"timeout": float, "cached_statements": int, "detect_types": int}
_SQLITE_FLAGS: Final = ("check_same_thread", "uri")
_TRUE_FALSE: Final = frozenset({"true", "false", "1", "0", "yes", "no", "on", "off"})


def check_sqlite_query(url: URL) -> None:
    """A SQLite URL's query parameters checked (`timeout` a number, flags booleans)."""
    for key, kind in _SQLITE_NUMBERS.items():
        if key in url.query:
            value = _single(url, key)
            try:
                number = kind(value)
            except ValueError:
                raise _bad(f"{key} must be a {kind.__name__}, not {value!r}") from None
            if not math.isfinite(number) or number < 0:
                raise _bad(f"{key} must be a {kind.__name__} >= 0, not {value!r}")
    for key in _SQLITE_FLAGS:
        if key in url.query and _single(url, key).lower() not in _TRUE_FALSE:
            raise _bad(f"{key} must be true or false, not {_single(url, key)!r}")


def _single(url: URL, key: str) -> str:
    value = url.query[key]
    if not isinstance(value, str):
        raise _bad(f"{key} is given more than once")
    return value


def _libpq_keywords() -> frozenset[str]:
    import psycopg

    return frozenset(item.keyword.decode() for item in psycopg.pq.Conninfo.get_defaults())


def _check_libpq(url: URL, key: str) -> None:
    if key in _WHOLE_NUMBERS:
        value = _single(url, key)
        if not value.strip().isdigit():
            raise _bad(f"{key} must be a whole number of seconds or a count, not {value!r}")
    elif key in _CHOICES:
        value = _single(url, key)
        if value not in _CHOICES[key]:
            raise _bad(f"{key} must be one of {', '.join(sorted(_CHOICES[key]))}, not {value!r}")


def _prepare_threshold(value: str) -> int | None:
    if value.strip().lower() in {"", "none", "null"}:
        return None
    if not value.strip().isdigit():
        raise _bad(f"prepare_threshold must be a whole number or none, not {value!r}")
    return int(value)


def driver_name(url: URL) -> str | None:
    """The URL's driver, None for an unknown dialect (`create_engine` then says so)."""
    try:
        return str(url.get_driver_name())
    except (NoSuchModuleError, ImportError):
        return None


def psycopg_options(url: URL) -> tuple[URL, dict[str, Any]]:
    """A psycopg URL without psycopg's own arguments (`prepare_threshold`), typed, and
    every libpq parameter of its query checked."""
    arguments: dict[str, Any] = {}
    if "prepare_threshold" in url.query:
        arguments["prepare_threshold"] = _prepare_threshold(_single(url, "prepare_threshold"))
    keywords = _libpq_keywords()
    for key in url.query:
        if key in PSYCOPG_ARGUMENTS or key in _SQLALCHEMY_QUERY:
            continue
        if key not in keywords:
            raise _bad(f"unknown connection parameter {key!r}")
        _check_libpq(url, key)
    return url.difference_update_query(PSYCOPG_ARGUMENTS), arguments


def driver_options(url: URL) -> tuple[URL, dict[str, Any]]:
    """`url` without the query parameters that are the driver's own arguments, and those
    arguments converted to their types (for `connect_args`); every other parameter checked
    (by the URL's backend: an engine cadence-store does not serve is left to
    `create_engine`)."""
    from .backends import backend_of_url  # the backends build on this module's checks

    backend = backend_of_url(url)
    return (url, {}) if backend is None else backend.url_arguments(url)


def sync_twin_url(url: URL) -> URL | None:
    """The same database through its sync driver (pysqlite, psycopg): for the worker
    thread that serves `AsyncRunStore`'s calls without host callbacks, and for the command
    line given an async URL. None where there is no such twin (an in-memory SQLite
    database is private to its connection)."""
    from .backends import backend_of_url

    backend = backend_of_url(url)
    return None if backend is None else backend.sync_twin(url)
