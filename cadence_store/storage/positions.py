"""The highest feed position numbered: of the events, or of the leaves an archive kept of
the events it deleted (`kept_leaves`), so that a position is never numbered twice and
the tree's size counts the archived leaves. Each side is one index descent."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, literal_column, select, union_all

from .models import events, kept_leaves


def highest_position() -> Select[Any]:
    """`SELECT` of the highest position numbered (0: none)."""
    highest = union_all(
        select(func.max(events.c.feed_position).label("position")),
        select(func.max(kept_leaves.c.feed_position).label("position")),
    ).subquery("highest")
    # the numbers written into the statement: no value to pick for them on every append
    return select(func.coalesce(func.max(highest.c.position), literal_column("0")))


__all__ = ["highest_position"]
