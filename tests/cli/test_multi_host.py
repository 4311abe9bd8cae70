"""Multi-host PostgreSQL URLs (`host=...&host=...&target_session_attrs=read-write`): the
first host is gone, the second is the primary. `upgrade`, `RunStore` and the command line
work with them, and no message shows the password."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from support import ROOT_HASH

from cadence_store import RunStore, SchemaOutOfDateError, upgrade
from cadence_store.storage.engine import masked_url

pytestmark = pytest.mark.postgres

SECRET = "s3cret"


@pytest.fixture
def multi_host_url(pg_database_url: str, tmp_path: Any) -> str:
    """A dead host first (a socket directory with no server), then the real server."""
    url = make_url(pg_database_url)
    live = f"{url.query['host']}:{url.query['port']}"
    gone = f"{tmp_path}/no-server-here:5432"
    return (
        f"postgresql+psycopg://postgres:{SECRET}@/{url.database}"
        f"?host={gone}&host={live}&target_session_attrs=read-write"
    )


def test_masked_url_keeps_every_host_and_hides_the_password(multi_host_url: str) -> None:
    shown = masked_url(multi_host_url)
    assert SECRET not in shown and "***" in shown
    assert shown.count("host=") == 2 and "target_session_attrs=read-write" in shown


def test_upgrade_and_run_store_work_with_a_multi_host_url(multi_host_url: str) -> None:
    with pytest.raises(SchemaOutOfDateError) as caught:
        RunStore(multi_host_url, root_hash=ROOT_HASH)
    assert SECRET not in str(caught.value) and SECRET not in caught.value.command
    upgrade(multi_host_url)
    with RunStore(multi_host_url, root_hash=ROOT_HASH, read_bind=multi_host_url) as store:
        run = store.start_run("abel-implement", change="c1", operation_id="start-1")
        store.transition(run.run_id, "paused", operation_id="pause-1")
        assert store.verify_integrity(run.run_id).sequence == 2
        assert SECRET not in masked_url(store.engine.url)


def test_the_command_line_works_with_a_multi_host_url(cli: Any, multi_host_url: str) -> None:
    before = cli("runs", "--url", multi_host_url)
    assert before.exit_code == 3 and SECRET not in before.output

    upgraded = cli("upgrade", "--url", multi_host_url)
    assert upgraded.exit_code == 0, upgraded.output
    assert SECRET not in upgraded.output

    started = cli(
        "start",
        "--stage",
        "abel-implement",
        "--change",
        "c1",
        "--operation-id",
        "start-1",
        "--root-hash",
        ROOT_HASH,
        "--url",
        multi_host_url,
    )
    assert started.exit_code == 0, started.output
    run_id = json.loads(started.stdout)["runId"]
    moved = cli(
        "transition", run_id, "paused", "--operation-id", "pause-1", "--url", multi_host_url
    )
    assert moved.exit_code == 0, moved.output

    info = json.loads(cli("info", "--url", multi_host_url, "--json").stdout)
    assert info["runs"] == 1 and info["events"] == 2 and info["atHead"] is True
    assert SECRET not in info["database"] and "***" in info["database"]
    for command in (["info"], ["runs"], ["verify"], ["show", run_id], ["show", "nope"]):
        result = cli(*command, "--url", multi_host_url)
        assert SECRET not in result.output, command
