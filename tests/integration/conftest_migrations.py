"""Shared helpers of the migration / adoption / state-root / host-app tests (issue 3).

Imported explicitly (`from integration.conftest_migrations import ...`): pytest does not
load it by itself, and `tests/` is on sys.path (tests/conftest.py puts it there). The
multiprocessing workers live here so that spawned children can import them by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from support import FakeClock

from cadence_store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "cadence-1x"
MANIFEST_PATH = FIXTURES / "manifest.json"
BIN_DIR = Path(sys.executable).parent  # the venv's bin (not resolved: keep the venv)
ADOPTABLE = ("current.sqlite3", "legacy-v4.sqlite3", "legacy-v2.sqlite3")
# cadence-store's own tables and its version table.
OWNED = frozenset(
    {
        "runs",
        "events",
        "operations",
        "delivery_bindings",
        "follower_positions",
        "tree_tiles",
        "checkpoints",
        "kept_leaves",
        "archived_runs",
        "archived_operations",
    }
)
VERSION_TABLE = "cadence_store_version"


@cache
def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    return data


def store_entry(file: str) -> dict[str, Any]:
    for entry in manifest()["stores"]:
        if entry["file"] == file:
            return dict(entry)
    raise KeyError(file)


def adopted_store(url: str, fixture: str) -> RunStore:
    """A store on an adopted copy of `fixture`, with the fixture's consumer root hash and a
    fake clock."""
    return RunStore(url, root_hash=store_entry(fixture)["consumerRootHash"], clock=FakeClock())


def copy_fixture(file: str, directory: Path, name: str | None = None) -> Path:
    """A private copy of a fixture store (SQLite writes -wal/-shm beside an opened file)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / (name or file)
    shutil.copyfile(FIXTURES / file, target)
    return target


def sqlite_url(path: Path | str) -> str:
    return f"sqlite:///{path}"


def sha256_file(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def edit_sqlite(path: Path, *statements: str) -> None:
    """Apply raw sqlite3 edits, then leave the file self-contained (no -wal, DELETE mode).

    The connection is closed and the WAL checkpointed before returning, so that hashing
    the file afterwards sees every byte of the store.
    """
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA foreign_keys = OFF")
        connection.execute("BEGIN")
        for statement in statements:
            connection.execute(statement)
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mode = connection.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        assert mode == "delete", mode
    finally:
        connection.close()
    assert not Path(f"{path}-wal").exists()
    assert not Path(f"{path}-shm").exists()


def settle_sqlite(path: Path) -> None:
    """Checkpoint a copied fixture into DELETE mode without changing its content."""
    edit_sqlite(path)


def query(path: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows as dicts (column order kept), read through a read-only connection."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in connection.execute(sql, params).fetchall()]
    finally:
        connection.close()


def table_names(path: Path | str) -> set[str]:
    rows = query(
        path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    )
    return {row["name"] for row in rows}


def column_names(path: Path | str, table: str) -> list[str]:
    return [row["name"] for row in query(path, f'PRAGMA table_info("{table}")')]


def version_rows(path: Path | str) -> list[str]:
    return [row["version_num"] for row in query(path, f"SELECT version_num FROM {VERSION_TABLE}")]


def sorted_rows(rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: tuple(str(row[key]) for key in keys))


def table_rows(path: Path | str, table: str, *keys: str) -> list[dict[str, Any]]:
    return sorted_rows(query(path, f'SELECT * FROM "{table}"'), *keys)


def run_tool(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of the venv's console scripts (alembic, cadence-store) from the repo root."""
    return subprocess.run(
        [str(BIN_DIR / name), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env if env is not None else {**os.environ},
        check=False,
    )


def alembic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_tool("alembic", *args, env=env)


def cadence_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_tool("cadence-store", *args)


def owned_only(
    object_: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """include_object for the drift check: the four owned tables only."""
    if type_ == "table":
        return name in OWNED
    table = getattr(object_, "table", None)
    return getattr(table, "name", None) in OWNED


def drift(connection: Connection) -> list[Any]:
    """Alembic autogenerate's comparison of the live models with the database."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from cadence_store.storage import models
    from cadence_store.storage.schema import comparison_filter

    # the filter env.py uses (so `alembic check` agrees): owned tables only, and on SQLite
    # no constraint SQLite's own catalogue shows enforced in an equivalent form
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_object": comparison_filter(connection)}
    )
    return list(compare_metadata(context, models.metadata))


# -- multiprocessing workers (spawned children import this module by name) -----------------


def upgrade_worker(url: str, barrier: Any, results: Any, tag: str) -> None:
    """Import everything first, line up with the other process, then upgrade."""
    try:
        import cadence_store

        barrier.wait(timeout=60)
        revision = cadence_store.upgrade(url)
        results.put((tag, "ok", revision))
    except BaseException as error:  # reported to the parent, which asserts on it
        results.put((tag, "error", f"{type(error).__name__}: {error}"))


def open_worker(spec: str, barrier: Any, results: Any, tag: str) -> None:
    """`RunStore.open` on a state root (spec: JSON of consumer root and XDG state home)."""
    try:
        from cadence_store import RunStore
        from cadence_store.store.state_root import resolve_state_root

        where = json.loads(spec)
        root = resolve_state_root(where["consumer"], xdg_state_home=where["xdg"])
        barrier.wait(timeout=60)
        with RunStore.open(root) as store:
            run_ids = store.run_ids()
        results.put((tag, "ok", str(len(run_ids))))
    except BaseException as error:  # reported to the parent, which asserts on it
        results.put((tag, "error", f"{type(error).__name__}: {error}"))


def run_in_processes(
    target: Callable[..., None], url: str, count: int = 2
) -> list[tuple[str, str, str]]:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count)
    results = context.Queue()
    processes = [
        context.Process(target=target, args=(url, barrier, results, f"p{index}"))
        for index in range(count)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0, process.exitcode
    return sorted(outcomes)
