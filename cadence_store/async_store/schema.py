"""`upgrade_async`: the migrations through an async driver."""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from ..storage.schema import upgrade
from .engine import create_async_store_engine


async def upgrade_async(
    bind: str | URL | AsyncEngine, revision: str = "heads", *, schema: str | None = None
) -> str | None:
    """`cadence_store.upgrade` on an async URL or `AsyncEngine`: the same migrations (and
    cadence 1.x adoption), run through the async driver without blocking the event loop."""
    engine = bind if isinstance(bind, AsyncEngine) else create_async_store_engine(bind)
    try:
        return await greenlet_spawn(upgrade, engine.sync_engine, revision, schema=schema)
    finally:
        if engine is not bind:
            await engine.dispose()


__all__ = ["upgrade_async"]
