"""What the web view's tests share: runs with hostile data, the whole database as a
digest, and the paths of every route."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import Engine, MetaData, select, text

from cadence_store import RunStore

# What a stored outcome or pause code may hold: markup, quotes, a lone surrogate (cadence
# 1.x accepted any string), 100 KB, and JSON nested deep.
SCRIPT = "<script>window.__cadencePwned = 1</script>"
QUOTES = '"\'><img src=x onerror="window.__cadencePwned=2">'
LONE_SURROGATE = "lone \udc80 surrogate"
LARGE = "L" * 100_000


def deep_json(levels: int) -> dict[str, Any]:
    """An object nested `levels` deep."""
    root: dict[str, Any] = {}
    level = root
    for _ in range(levels):
        level["d"] = {}
        level = level["d"]
    return root


def hostile_run(store: RunStore) -> str:
    """A run whose pause code, outcome and binding hold hostile text; its run id."""
    run = store.start_run("abel-implement", change="hostile", operation_id="hostile-start")
    for state in ("validating-delivery", "ready", "queued", "running"):
        store.transition(run.run_id, state, operation_id=f"hostile-{state}")
    store.bind_delivery(run.run_id, "gate-a", 1, "ab" * 32, operation_id="hostile-bind")
    lease = store.acquire_lease(run.run_id, "hostile-lease", 60_000)
    outcome = {
        "html": SCRIPT,
        "quotes": QUOTES,
        "lone": LONE_SURROGATE,
        "large": LARGE,
        "deep": deep_json(300),
    }
    store.commit_lease(lease, outcome)
    store.transition(run.run_id, "paused", operation_id="hostile-pause", code=SCRIPT)
    return run.run_id


def plain_runs(store: RunStore, count: int, *, change: str = "plain") -> list[str]:
    """`count` runs of changes `{change}-N`: every third one moved to
    `validating-delivery`; their ids, sorted."""
    ids = []
    for number in range(count):
        run = store.start_run(
            "abel-implement", change=f"{change}-{number}", operation_id=f"{change}-{number}"
        )
        if number % 3 == 0:
            store.transition(run.run_id, "validating-delivery", operation_id=f"{change}-v{number}")
        ids.append(run.run_id)
    return sorted(ids)


def long_run(store: RunStore, pairs: int) -> str:
    """A run of `4 + 2 * pairs` events (running, then paused with code `p{N}`)."""
    run = store.start_run("abel-implement", change="long", operation_id="long")
    for state in ("validating-delivery", "ready", "queued"):
        store.transition(run.run_id, state, operation_id=f"long-{state}")
    with store.unit_of_work() as uow:
        for number in range(pairs):
            uow.runs.transition(run.run_id, "running", operation_id=f"run-{number}")
            uow.runs.transition(run.run_id, "paused", operation_id=f"p-{number}", code=f"p{number}")
    return run.run_id


def database_digest(engine: Engine) -> dict[str, tuple[int, str]]:
    """Every table of the database (cadence-store's and any other): its row count and a
    sha256 of its rows in a fixed order."""
    metadata = MetaData()
    metadata.reflect(engine)
    digest = {}
    with engine.connect() as connection:
        for name, table in sorted(metadata.tables.items()):
            rows = connection.execute(select(table).order_by(*table.columns)).all()
            text_of_rows = repr([tuple(row) for row in rows]).encode("utf-8", "backslashreplace")
            digest[name] = (len(rows), hashlib.sha256(text_of_rows).hexdigest())
        connection.rollback()
    return digest


def break_chain(engine: Engine, run_id: str, sequence: int) -> None:
    """Change a stored event's payload behind the store's back."""
    with engine.begin() as connection:
        changed = connection.execute(
            text(
                "UPDATE events SET payload_json = :payload "
                "WHERE run_id = :run_id AND sequence = :sequence"
            ),
            {"payload": '{"tampered":true}', "run_id": run_id, "sequence": sequence},
        )
        assert changed.rowcount == 1


def routes(run_id: str) -> list[str]:
    """A path of every route of the app."""
    return ["/", f"/runs/{run_id}", "/feed", "/api/runs", f"/api/runs/{run_id}", "/healthz"]
