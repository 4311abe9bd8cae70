"""Async engines: the async driver of a URL, and cadence-store's own `AsyncEngine`."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, InvalidRequestError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..errors import InvalidInputError
from ..storage.backends import backend_of_url
from ..storage.database_url import sync_twin_url
from ..storage.engine import masked_url, parse_url, store_engine_arguments, use_store_pragmas
from ..storage.pg_prepare import use_prepare_policy


def async_database_url(url: str | URL) -> URL:
    """`url` with an async driver: `sqlite` → `sqlite+aiosqlite`, `postgresql` →
    `postgresql+psycopg` (psycopg 3 serves both; SQLAlchemy picks its async mode)."""
    parsed = parse_url(url)
    backend = backend_of_url(parsed)  # a synchronous URL names the async driver's twin
    return parsed if backend is None else backend.async_url(parsed)


def create_async_store_engine(url: str | URL, **engine_options: Any) -> AsyncEngine:
    """An `AsyncEngine` for cadence-store's own use: `create_store_engine`'s arguments
    (typed query parameters, psycopg's prepare policy) and SQLite pragmas, set on each
    new connection."""
    parsed, engine_options = store_engine_arguments(async_database_url(url), engine_options)
    try:
        engine = create_async_engine(parsed, **engine_options)
    except (ImportError, NoSuchModuleError, ArgumentError, InvalidRequestError, TypeError) as error:
        # an unknown dialect, a driver that is not installed or not async, bad options
        raise InvalidInputError("invalid-database-url", type(error).__name__) from None
    use_store_pragmas(engine.sync_engine)
    connect_args = engine_options.get("connect_args") or {}
    use_prepare_policy(engine.sync_engine, connect_args, masked_url(parsed))
    return engine


__all__ = ["async_database_url", "create_async_store_engine", "sync_twin_url"]
