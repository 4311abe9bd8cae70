"""Every database URL form the documentation shows, through every command of the group.

The forms (README, docs/): `postgresql+psycopg://` (with a socket directory as `?host=`),
driverless `postgresql://` and `postgres://`, the libpq multi-host form that
`pg_autoctl show uri` prints (`postgres://u@h1:p1,h2:p2/db?target_session_attrs=...`),
SQLAlchemy's `?host=h1:p1&host=h2:p2` form, a password with connection options, and on
SQLite a relative path, an absolute path and the async URL of the FastAPI recipe
(`sqlite+aiosqlite:///`, used through its sync driver). The multi-host forms name a host
with no server first and the real server second.

The commands come from the click group itself: a new command fails here until it has a
check in `CHECKS`. Each check runs the command against the real database and asserts
what it read or wrote there (past URL parsing, into the database)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import pytest
from sqlalchemy.engine import make_url
from support import ROOT_HASH

from cadence_store import RunStore, generate_signer_key, upgrade
from cadence_store.cli import main
from cadence_store.cli.render import with_additions
from cadence_store.journal import js_stringify
from cadence_store.journal.note_keys import parse_signer_key
from cadence_store.storage.schema import head_revision
from cadence_store.transfer import export_store

SECRET = "f0rm-s3cret"
RECEIPT = "c" * 64
TIMEOUT_S = 60
# the follow child imports this checkout's cadence_store, whatever its working directory
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[str]:
    names: list[str] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            names += _leaf_commands(command, (*prefix, name))
        else:
            names.append(" ".join((*prefix, name)))
    return names


COMMANDS = _leaf_commands(main)


# -- the URL forms, built from the test database's own URL ---------------------------------


def _socket_parts(url: str) -> tuple[str, str, str, str]:
    parsed = make_url(url)
    return (
        str(parsed.username),
        str(parsed.database),
        str(parsed.query["host"]),
        str(parsed.query["port"]),
    )


def _pg_form(name: str, url: str, gone: str) -> str:
    user, database, socket_dir, port = _socket_parts(url)
    host = quote(socket_dir, safe="/")
    return {
        "postgresql+psycopg": url,
        "postgresql": f"postgresql://{user}@/{database}?host={host}&port={port}",
        "postgres": f"postgres://{user}@/{database}?host={host}&port={port}",
        "libpq-multi-host": (
            f"postgres://{user}@{quote(gone, safe='')}:5432,{quote(socket_dir, safe='')}:{port}"
            f"/{database}?target_session_attrs=read-write"
        ),
        "query-multi-host": (
            f"postgresql+psycopg://{user}@/{database}?host={quote(gone, safe='/')}:5432"
            f"&host={host}:{port}&target_session_attrs=read-write"
        ),
        "password-and-options": (
            f"postgresql+psycopg://{user}:{SECRET}@/{database}?host={host}&port={port}"
            "&connect_timeout=5"
        ),
    }[name]


def _sqlite_form(name: str, path: Path) -> str:
    return {
        "sqlite-relative": f"sqlite:///{path.name}",  # run from the file's directory
        "sqlite-absolute": f"sqlite:///{path}",
        "sqlite+aiosqlite": f"sqlite+aiosqlite:///{path}",
    }[name]


PG_FORMS = [
    "postgresql+psycopg",
    "postgresql",
    "postgres",
    "libpq-multi-host",
    "query-multi-host",
    "password-and-options",
]
SQLITE_FORMS = ["sqlite-relative", "sqlite-absolute", "sqlite+aiosqlite"]
FORM_PARAMS = [pytest.param(("sqlite", name), id=name) for name in SQLITE_FORMS] + [
    pytest.param(("postgresql", name), id=name, marks=pytest.mark.postgres) for name in PG_FORMS
]


@dataclass
class Database:
    form: str  # the URL under test
    canonical: str  # the same database as the fixtures write it, for the API's checks


@pytest.fixture(scope="module", params=FORM_PARAMS)
def form_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Database:
    """A database at head per form, shared by the module's tests of that form: each test
    seeds runs of its own and compares with what the API reads at that moment."""
    engine, name = request.param
    if engine == "postgresql":
        canonical = request.getfixturevalue("pg_module_database_url")
        gone = tmp_path_factory.mktemp("no-server-here")  # a socket directory, no server
        form = _pg_form(name, canonical, str(gone))
    else:
        path = tmp_path_factory.mktemp("sqlite-forms") / "store.sqlite3"
        canonical = f"sqlite:///{path}"
        form = _sqlite_form(name, path)
    upgrade(canonical)
    return Database(form, canonical)


@pytest.fixture
def database(form_database: Database, isolated: Any, monkeypatch: pytest.MonkeyPatch) -> Database:
    """`form_database`, from its file's directory on SQLite (the relative form's)."""
    parsed = make_url(form_database.canonical)
    if parsed.get_backend_name() == "sqlite":
        monkeypatch.chdir(Path(parsed.database or "").parent)
    return form_database


# -- what each command is given, and what it must have done ---------------------------------


@dataclass
class Seeded:
    """One test's runs: an implement run holding a live lease, a provisional design run."""

    run_id: str
    design_id: str
    operation_id: str
    lease: str  # the lease as `lease acquire` prints it


@dataclass
class Call:
    cli: Callable[..., Any]
    url: str
    store: RunStore  # on the canonical URL: what the command did, seen through the API
    seeded: Seeded
    tmp_path: Path

    def ok(self, *args: str) -> Any:
        result = self.cli(*args, "--url", self.url)
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
        return result


@pytest.fixture
def store(database: Database) -> Iterator[RunStore]:
    with RunStore(database.canonical, root_hash=ROOT_HASH) as opened:
        yield opened


@pytest.fixture
def seeded(store: RunStore) -> Seeded:
    tag = f"forms-{uuid.uuid4().hex[:8]}"
    run = store.start_run("abel-implement", change=tag, operation_id=f"{tag}-start")
    design = store.start_run(
        "abel-design", provisional_key=uuid.uuid4().hex * 2, operation_id=f"{tag}-design"
    )
    operation = f"{tag}-apply"
    lease = js_stringify(with_additions(store.acquire_lease(run.run_id, operation, 60_000)))
    return Seeded(run.run_id, design.run_id, operation, lease)


def _json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


CHECKS: dict[str, Callable[[Call], None]] = {}


def check(command: str) -> Callable[[Callable[[Call], None]], Callable[[Call], None]]:
    def register(function: Callable[[Call], None]) -> Callable[[Call], None]:
        CHECKS[command] = function
        return function

    return register


@check("upgrade")
def _upgrade(call: Call) -> None:
    assert f"{head_revision()} (head)" in call.ok("upgrade").stdout


@check("info")
def _info(call: Call) -> None:
    info = json.loads(call.ok("info", "--json").stdout)
    counts = call.store.counts()
    assert (info["runs"], info["events"], info["atHead"]) == (counts.runs, counts.events, True)


@check("runs")
def _runs(call: Call) -> None:
    listed = {run["runId"] for run in _json_lines(call.ok("runs", "--json").stdout)}
    assert listed == set(call.store.run_ids())


@check("show")
def _show(call: Call) -> None:
    shown = json.loads(call.ok("show", call.seeded.run_id, "--json").stdout)["status"]
    assert shown["runId"] == call.seeded.run_id and shown["state"] == "created"


@check("events")
def _events(call: Call) -> None:
    events = _json_lines(call.ok("events", call.seeded.run_id, "--json").stdout)
    assert [event["type"] for event in events] == ["run-created"]


@check("verify")
def _verify(call: Call) -> None:
    report = json.loads(call.ok("verify", "--json").stdout)
    assert (report["verified"], report["broken"]) == (len(call.store.run_ids()), [])


@check("export")
def _export(call: Call) -> None:
    exported = _json_lines(call.ok("export").stdout)
    assert len(exported) == len(call.store.run_ids())
    assert call.seeded.run_id in call.ok("export").stdout


@check("import")
def _import(call: Call) -> None:
    export_file = call.tmp_path / "seeded.jsonl"
    with export_file.open("w", encoding="utf-8") as handle:
        runs = export_store(call.store.engine, handle).runs_written
    imported = call.ok("import", str(export_file)).stdout
    assert "imported 0 run(s), 0 event(s)" in imported
    assert f"{runs} already present and identical" in imported


@check("copy")
def _copy(call: Call) -> None:
    runs = len(call.store.run_ids())
    other = f"sqlite:///{call.tmp_path / 'other.sqlite3'}"
    upgrade(other)
    out = call.cli("copy", "--from", call.url, "--to", other)
    assert out.exit_code == 0 and f"copied {runs} run(s)" in out.stdout, out.output
    back = call.cli("copy", "--from", other, "--to", call.url)
    assert back.exit_code == 0, back.output
    assert "copied 0 run(s), 0 event(s)" in back.stdout
    assert f"{runs} already present and identical" in back.stdout
    assert SECRET not in out.output + back.output


@check("demo")
def _demo(call: Call) -> None:
    runs = len(call.store.run_ids())
    assert f"verified {runs + 2} run(s)" in call.ok("demo").stdout
    assert len(call.store.run_ids()) == runs + 2


@check("start")
def _start(call: Call) -> None:
    started = json.loads(
        call.ok(
            "start", "--stage", "abel-implement", "--change", "forms-started",
            "--operation-id", "forms-start", "--root-hash", ROOT_HASH,
        ).stdout
    )  # fmt: skip
    assert call.store.status(started["runId"]).change == "forms-started"


@check("bind-change")
def _bind_change(call: Call) -> None:
    change = f"bound-{call.seeded.operation_id}"
    call.ok("bind-change", call.seeded.design_id, change, "--operation-id", "forms-bind")
    assert call.store.status(call.seeded.design_id).change == change


@check("transition")
def _transition(call: Call) -> None:
    call.ok("transition", call.seeded.run_id, "paused", "--operation-id", "forms-pause")
    assert call.store.status(call.seeded.run_id).state == "paused"


@check("bind-delivery")
def _bind_delivery(call: Call) -> None:
    call.ok(
        "bind-delivery", call.seeded.run_id, "--gate", "gate-a", "--revision", "1",
        "--receipt-hash", RECEIPT, "--operation-id", "forms-deliver",
    )  # fmt: skip
    assert call.store.status(call.seeded.run_id).delivery_revision == 1


@check("lease acquire")
def _lease_acquire(call: Call) -> None:
    lease = json.loads(call.ok("lease", "acquire", call.seeded.run_id, "forms-other").stdout)
    status = call.store.inspect_operation(call.seeded.run_id, "forms-other")
    assert status is not None and (status.state, status.fence) == ("running", lease["fence"])


@check("lease renew")
def _lease_renew(call: Call) -> None:
    before = call.store.inspect_operation(call.seeded.run_id, call.seeded.operation_id)
    renewed = json.loads(call.ok("lease", "renew", call.seeded.lease, "--ttl-ms", "600000").stdout)
    after = call.store.inspect_operation(call.seeded.run_id, call.seeded.operation_id)
    assert before is not None and after is not None
    assert renewed["fence"] == after.fence and (after.expires_at or 0) > (before.expires_at or 0)


@check("lease commit")
def _lease_commit(call: Call) -> None:
    call.ok("lease", "commit", call.seeded.lease, "--outcome", '{"forms": true}')
    status = call.store.inspect_operation(call.seeded.run_id, call.seeded.operation_id)
    assert status is not None and status.state == "committed"


@check("lease interrupt")
def _lease_interrupt(call: Call) -> None:
    call.ok("lease", "interrupt", call.seeded.lease)
    status = call.store.inspect_operation(call.seeded.run_id, call.seeded.operation_id)
    assert status is not None and status.state == "interrupted"


@check("lease status")
def _lease_status(call: Call) -> None:
    status = json.loads(
        call.ok("lease", "status", call.seeded.run_id, call.seeded.operation_id).stdout
    )
    assert (
        status["state"] == "running" and status["fence"] == json.loads(call.seeded.lease)["fence"]
    )


@check("follow")
def _follow(call: Call) -> None:
    # follow runs until interrupted: a child process, its first line, then Ctrl-C
    command = [sys.executable, "-m", "cadence_store", "follow", "--run", call.seeded.run_id]
    process = subprocess.Popen(
        [*command, "--json", "--url", call.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CHILD_ENV,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert line, err
    first = json.loads(line)
    assert (first["runId"], first["event"]["sequence"]) == (call.seeded.run_id, 1)
    assert process.returncode == 0, err
    assert SECRET not in line + out + err


@check("serve")
def _serve(call: Call) -> None:
    # serve runs until interrupted: a child process, the line saying where it listens,
    # the run's JSON twin read over HTTP, then Ctrl-C
    command = [sys.executable, "-m", "cadence_store", "serve", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--url", call.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**CHILD_ENV, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = ""
        while "listening on http://" not in line:
            line = process.stdout.readline()
            if not line:
                break
        assert "listening on http://" in line, process.stderr.read() if process.stderr else ""
        base = line.split("listening on ", 1)[1].strip().rstrip("/")
        address = f"{base}/api/runs/{call.seeded.run_id}"
        with urllib.request.urlopen(address, timeout=TIMEOUT_S) as response:
            body = response.read().decode()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert call.seeded.run_id in body
    assert process.returncode == 0, err
    assert SECRET not in line + out + err + body


@check("keygen")
def _keygen(call: Call) -> None:
    # no database: the key file and the verifier key
    out = call.tmp_path / "forms.key"
    made = call.cli("keygen", "forms.example", "--out", str(out))
    assert made.exit_code == 0, made.output
    assert parse_signer_key(out.read_text().strip()).verifier().encode() == made.stdout.strip()


@check("checkpoint")
def _checkpoint(call: Call) -> None:
    key = generate_signer_key("forms.example")
    key_file = call.tmp_path / "forms.key"
    key_file.write_text(key.encode())
    note = call.ok("checkpoint", "--key", str(key_file)).stdout
    report = call.store.verify_checkpoint(note, key.verifier())
    assert report.runs_verified == len(call.store.run_ids())


@check("archive")
def _archive(call: Call) -> None:
    # nothing finished is archived: the seeded runs stay, the file holds none of them
    key_file = call.tmp_path / "forms.key"
    key_file.write_text(generate_signer_key("forms.example").encode())
    archive = call.tmp_path / "forms.archive"
    out = call.ok("archive", "--before", "1", "--to", str(archive), "--key", str(key_file))
    assert "archived 0 run(s)" in out.stdout and archive.exists()
    assert call.store.status(call.seeded.run_id).run_id == call.seeded.run_id


@check("prove")
def _prove(call: Call) -> None:
    signed = call.store.checkpoint(generate_signer_key("forms.example"))
    note_file = call.tmp_path / "head.txt"
    note_file.write_text(signed.note)
    proof = json.loads(call.ok("prove", call.seeded.run_id, "--checkpoint", str(note_file)).stdout)
    assert (proof["leaf"]["runId"], proof["treeSize"]) == (call.seeded.run_id, signed.size)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_every_documented_url_form(
    command: str, database: Database, store: RunStore, seeded: Seeded, cli: Any, tmp_path: Path
) -> None:
    if command not in CHECKS:
        pytest.fail(f"`cadence-store {command}` has no URL-form check: add one to CHECKS")
    CHECKS[command](Call(cli, database.form, store, seeded, tmp_path))


def test_the_environment_variable_takes_every_documented_url_form(
    database: Database, store: RunStore, seeded: Seeded, cli: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("CADENCE_STORE_URL", database.form)
    listed = cli("runs", "--json")
    assert listed.exit_code == 0, listed.output
    assert {run["runId"] for run in _json_lines(listed.stdout)} == set(store.run_ids())
    assert SECRET not in listed.output
