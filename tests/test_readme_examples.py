"""The README's Python examples run top to bottom as one script, on SQLite.

Every ```python block of README.md runs in order in one namespace, so a later example
sees the store, run and leases the earlier ones left behind, as a reader would. A block
whose first line is `# not run: <why>` is skipped (it needs a server, a web framework or
an Alembic env.py). Blocks with `await` run on one asyncio event loop.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)
NOT_RUN = "# not run:"


class HostBase(DeclarativeBase):
    pass


class _HostRow:
    """A host application's row: `HostRow(...)` in the README makes an empty one."""

    def __init__(self, *_elided: object, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


class HostRow(_HostRow, HostBase):
    __tablename__ = "host_rows"
    id: Mapped[int] = mapped_column(primary_key=True)


class AuditRow(_HostRow, HostBase):
    __tablename__ = "audit_rows"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str | None] = mapped_column(String)
    note: Mapped[str | None] = mapped_column(String)
    request_id: Mapped[str | None] = mapped_column(String)


class OutboxRow(_HostRow, HostBase):
    __tablename__ = "outbox"
    id: Mapped[int] = mapped_column(primary_key=True)


def readme_blocks() -> list[tuple[int, str]]:
    """(line number, source) of every ```python block, indentation removed."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, textwrap.dedent(match.group(2)))
        for match in BLOCK.finditer(text)
    ]


def test_the_readme_has_runnable_examples() -> None:
    blocks = readme_blocks()
    skipped = [source for _, source in blocks if source.startswith(NOT_RUN)]
    assert len(blocks) >= 8
    assert len(skipped) <= 3, "keep the examples runnable; skip only what needs a server"


def test_readme_examples_run_as_one_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the examples use sqlite:///control.sqlite3
    engine = create_engine("sqlite:///control.sqlite3")
    HostBase.metadata.create_all(engine)  # a host application's own tables, beside cadence's
    # the blocks run in a module of their own, as a reader's script would: SQLAlchemy
    # resolves a model's annotations through sys.modules
    module = types.ModuleType("readme")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    namespace |= {
        "engine": engine,
        "Session": Session,
        "HostRow": HostRow,
        "AuditRow": AuditRow,
        "OutboxRow": OutboxRow,
        "root_hash": "ab" * 32,  # the store's, as the first example opens it
        "root": "ab" * 32,
    }
    exec("from sqlalchemy.ext.asyncio import AsyncSession", namespace)
    loop = asyncio.new_event_loop()
    try:
        for line, source in readme_blocks():
            if source.startswith(NOT_RUN):
                continue
            code = compile(
                source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(code, namespace)  # our own README
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
        # the last examples ran, the async one included
        assert namespace["bucket"].objects["report.json"] == b"final"
        assert callable(namespace["record"])
        assert callable(namespace["test_lease_expires"])
    finally:
        loop.close()
        engine.dispose()
        store = namespace.get("store")
        if store is not None and hasattr(store, "close"):
            closed = store.close()
            if inspect.iscoroutine(closed):
                closed.close()
