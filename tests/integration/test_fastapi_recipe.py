"""The README's FastAPI recipe, run as it is written (the block under "## Recipe: FastAPI").

A client replays one request id four times: one event, one audit row, four identical
answers. On SQLite and PostgreSQL (the async drivers), through FastAPI's TestClient.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from cadence_store import RunStore, upgrade
from cadence_store.async_store import async_database_url

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

README = Path(__file__).resolve().parents[2] / "README.md"
ROOT_HASH = "cd" * 32


def recipe_source() -> str:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("\n## Recipe: FastAPI\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert match is not None, "the recipe has a ```python block"
    return match.group(1)


def _load_recipe(database_url: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setenv(
        "CADENCE_STORE_URL", async_database_url(database_url).render_as_string(hide_password=False)
    )
    monkeypatch.setenv("CADENCE_ROOT_HASH", ROOT_HASH)
    # a module of its own, as `uvicorn recipe:app` would import it (SQLAlchemy resolves
    # the models' annotations through sys.modules)
    recipe = types.ModuleType("readme_fastapi_recipe")
    monkeypatch.setitem(sys.modules, recipe.__name__, recipe)
    exec(compile(recipe_source(), "README.md#recipe-fastapi", "exec"), recipe.__dict__)
    return recipe


def test_a_replayed_request_adds_one_event_and_one_host_row(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="recipe", operation_id="start-1")
    recipe = _load_recipe(database_url, monkeypatch)

    with TestClient(recipe.app) as client:
        answers = [
            client.post(f"/runs/{run.run_id}/pause", headers={"Request-Id": "pause-req-1"})
            for _ in range(4)
        ]
    assert [answer.status_code for answer in answers] == [200] * 4
    assert all(answer.json() == answers[0].json() for answer in answers)
    assert answers[0].json()["state"] == "paused"

    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            audit = connection.execute(text("SELECT run_id, request_id FROM pause_audit")).all()
            events = connection.execute(
                text("SELECT count(*) FROM events WHERE run_id = :r"), {"r": run.run_id}
            ).scalar_one()
    finally:
        engine.dispose()
    assert [tuple(row) for row in audit] == [(run.run_id, "pause-req-1")]
    assert events == 2  # run-created, and one state-transitioned for four requests


def test_coded_errors_are_http_answers(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """404 for an unknown run, 409 for a request that contradicts the journal, 422 for
    invalid input: each with its code, nothing written."""
    upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="recipe", operation_id="start-1")
        other = store.start_run("abel-implement", change="other", operation_id="start-2")
    recipe = _load_recipe(database_url, monkeypatch)

    with TestClient(recipe.app) as client:

        def pause(run_id: str, request_id: str) -> Any:
            return client.post(f"/runs/{run_id}/pause", headers={"Request-Id": request_id})

        unknown = pause("no-such-run", "req-1")
        assert (unknown.status_code, unknown.json()) == (404, {"error": "run-not-found"})
        # the run's start took this id: the request contradicts what is recorded
        conflict = pause(run.run_id, "start-1")
        assert (conflict.status_code, conflict.json()) == (409, {"error": "operation-id-conflict"})
        assert pause(run.run_id, "req-1").status_code == 200
        invalid = pause(other.run_id, "not an id")
        assert (invalid.status_code, invalid.json()) == (422, {"error": "invalid-operation-id"})

    with RunStore(database_url, root_hash=ROOT_HASH) as store:
        assert len(store.list_events(run.run_id)) == 2
        assert len(store.list_events(other.run_id)) == 1
