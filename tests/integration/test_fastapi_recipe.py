"""The README's FastAPI recipe, run as it is written (the block under "## Recipe: FastAPI").

A client replays one request id four times: one event, one audit row, four identical
answers. On SQLite and PostgreSQL (the async drivers), through FastAPI's TestClient.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

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


def test_a_replayed_request_adds_one_event_and_one_host_row(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="recipe", operation_id="start-1")
    monkeypatch.setenv(
        "CADENCE_STORE_URL", async_database_url(database_url).render_as_string(hide_password=False)
    )
    monkeypatch.setenv("CADENCE_ROOT_HASH", ROOT_HASH)
    # a module of its own, as `uvicorn recipe:app` would import it (SQLAlchemy resolves
    # the models' annotations through sys.modules)
    recipe = types.ModuleType("readme_fastapi_recipe")
    monkeypatch.setitem(sys.modules, recipe.__name__, recipe)
    exec(compile(recipe_source(), "README.md#recipe-fastapi", "exec"), recipe.__dict__)

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
