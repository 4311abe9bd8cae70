"""The CLI's answers say what to do (issue 22): secrets masked wherever they sit in a URL,
hints that can be pasted, `--schema` beside every `--url`, distinct codes for distinct
situations, pages of runs and a JSON verification report."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
from sqlalchemy.engine import make_url

from cadence_store import RunStore
from cadence_store.cli import main

SECRET = "s3cretQuery"


def with_query_password(url: str) -> str:
    return (
        make_url(url).update_query_dict({"password": SECRET}).render_as_string(hide_password=False)
    )


def test_a_password_in_the_query_is_never_printed(
    cli: Any, pg_database_url: str, fixture_url: str
) -> None:
    url = with_query_password(pg_database_url)
    assert f"password={SECRET}" in url
    before = cli("info", "--url", url)  # not at head: the hint names the upgrade command
    assert before.exit_code == 3
    assert SECRET not in before.output
    assert cli("upgrade", "--url", url).exit_code == 0
    copied = cli("copy", "--from", fixture_url, "--to", url)
    assert copied.exit_code == 0, copied.output
    assert SECRET not in copied.output
    for command in (["info"], ["info", "--json"], ["runs"], ["verify"], ["show", "nope"]):
        result = cli(*command, "--url", url)
        assert SECRET not in result.output, command
    info = json.loads(cli("info", "--url", url, "--json").stdout)
    assert "password=***" in info["database"]


def test_demo_follow_up_commands_can_be_pasted(cli: Any, pg_database_url: str) -> None:
    url = make_url(pg_database_url).set(password=SECRET).render_as_string(hide_password=False)
    assert cli("upgrade", "--url", url).exit_code == 0
    result = cli("demo", "--url", url)
    assert result.exit_code == 0, result.output
    suggestion = result.stdout.strip().splitlines()[-1]
    assert SECRET not in result.output
    assert "***" not in suggestion  # a masked password cannot be pasted
    for command in suggestion.removeprefix("Look around:").split(";"):
        words = shlex.split(command)
        pasted_url = words[words.index("--url") + 1]
        # the URL without its secret: libpq takes the password from PGPASSWORD / .pgpass
        assert make_url(pasted_url) == make_url(url)._replace(password=None)
        assert cli(*words[1:]).exit_code == 0  # and it runs (the test server trusts)


def test_an_upgrade_hint_is_pasteable_and_carries_its_schema(
    cli: Any, pg_database_url: str
) -> None:
    url = make_url(pg_database_url).set(password=SECRET).render_as_string(hide_password=False)
    assert cli("upgrade", "--url", url, "--schema", "cadence").exit_code == 0
    # the store is in schema "cadence": a command told so works, and says where it looked
    listed = cli("runs", "--url", url, "--schema", "cadence")
    assert listed.exit_code == 0, listed.output
    imported = cli("import", "-", "--url", url, "--schema", "cadence", input="")
    assert imported.exit_code == 0, imported.output
    # not told: the hint's command can be pasted, and names --schema
    missed = cli("import", "-", "--url", url, input="")
    assert missed.exit_code == 3
    assert "***" not in missed.stderr and SECRET not in missed.output
    assert "--schema" in missed.stderr
    hint = next(line for line in missed.stderr.splitlines() if "run: cadence-store" in line)
    command = shlex.split(hint.split("run: ", 1)[1].split(" (or", 1)[0])
    assert command[:2] == ["cadence-store", "upgrade"]
    assert make_url(command[command.index("--url") + 1]).password is None


def test_every_command_that_takes_a_url_takes_a_schema() -> None:
    def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
        found: dict[str, click.Command] = {}
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found |= commands(command, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = command
        return found

    with_url = {
        name: command
        for name, command in commands(main).items()
        if any("--url" in param.opts for param in command.params)
    }
    assert len(with_url) >= 15
    for name, command in with_url.items():
        assert any("--schema" in param.opts for param in command.params), name


@pytest.mark.parametrize(
    "url", ["sqlite:///:memory:", "sqlite://", "sqlite:///file:x?mode=memory&uri=true"]
)
def test_an_in_memory_database_is_refused(cli: Any, url: str) -> None:
    for command in (["upgrade"], ["info"], ["runs"], ["demo"]):
        result = cli(*command, "--url", url)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("error: in-memory-database-refused")
        assert "sqlite:///PATH" in result.stderr
        assert "is at" not in result.output  # no "upgraded" success


def test_a_file_that_is_not_a_database(cli: Any, tmp_path: Path) -> None:
    junk = tmp_path / "notes.sqlite3"
    junk.write_bytes(b"these are notes, not a database\n" * 200)
    for command in (["info"], ["upgrade"], ["runs"]):
        result = cli(*command, "--url", f"sqlite:///{junk}")
        assert result.exit_code == 3, (command, result.output)
        assert result.stderr.startswith("error: run-store-not-a-database"), result.stderr
        assert "not a SQLite database" in result.stderr
        assert "writable" not in result.stderr


def test_a_refused_login_is_its_own_code_and_not_waited_for(cli: Any, pg_database_url: str) -> None:
    url = (
        make_url(pg_database_url)
        .set(username="no_such_role_here")
        .render_as_string(hide_password=False)
    )
    for command in (["info"], ["runs"], ["upgrade"]):
        result = cli(*command, "--url", url)
        assert result.exit_code == 3, (command, result.output)
        assert result.stderr.startswith("error: run-store-auth-failed"), result.stderr
        assert "user and password" in result.stderr
    with pytest.raises(Exception) as info:
        RunStore(url, failover_timeout_s=600).status("r")  # refused at once: no 600 s wait
    assert getattr(info.value, "code", None) == "run-store-auth-failed"
    assert info.value.retryable is False


def test_an_exclusive_lease_on_a_running_operation_suggests_waiting_or_preempting(
    cli: Any, empty_url: str
) -> None:
    started = cli("start", "--stage", "abel-implement", "--change", "c1", "--operation-id",
                  "s1", "--url", empty_url)  # fmt: skip
    assert started.exit_code == 0, started.output
    run_id = json.loads(started.stdout)["runId"]
    first = cli("lease", "acquire", run_id, "apply-1", "--ttl-ms", "600000", "--url", empty_url)
    assert first.exit_code == 0, first.output
    again = cli("lease", "acquire", run_id, "apply-1", "--ttl-ms", "600000", "--exclusive",
                "--url", empty_url)  # fmt: skip
    assert again.exit_code == 3 or again.exit_code == 2
    assert again.stderr.startswith("error: operation-already-running")
    assert "--preempt" in again.stderr and "lease status" in again.stderr
    assert "new operation id" not in again.stderr


def test_runs_come_in_pages(cli: Any, fixture_url: str) -> None:
    everything = [json.loads(line)["runId"] for line in cli("runs", "--url", fixture_url,
                  "--json").stdout.splitlines()]  # fmt: skip
    ordered = sorted(everything)
    pages: list[str] = []
    after: list[str] = []
    while True:
        page = cli("runs", "--url", fixture_url, "--json", "--limit", "3", *after)
        assert page.exit_code == 0, page.output
        ids = [json.loads(line)["runId"] for line in page.stdout.splitlines()]
        if not ids:
            break
        assert len(ids) <= 3
        pages.extend(ids)
        after = ["--after", ids[-1]]
    assert pages == ordered
    table = cli("runs", "--url", fixture_url, "--limit", "3")
    assert f"next page: add --after {ordered[2]}" in table.stdout
    assert cli("runs", "--url", fixture_url, "--limit", "0").exit_code == 2


def test_verify_json(cli: Any, fixture_url: str, tmp_path: Path) -> None:
    result = cli("verify", "--url", fixture_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verified"] == report["ok"] == 8
    assert report["broken"] == []
    export = tmp_path / "runs.jsonl"
    assert cli("export", "--url", fixture_url, "--out", str(export)).exit_code == 0
    lines = export.read_text().splitlines()
    tampered = json.loads(lines[1])
    lines[1] = json.dumps({**tampered, "runId": tampered.get("runId")} | {"junk": 1})
    export.write_text("\n".join(lines) + "\n")
    broken = cli("verify", "--file", str(export), "--json")
    report = json.loads(broken.stdout)
    assert broken.exit_code == 1
    assert report["broken"] and report["ok"] == report["verified"] - len(report["broken"])
    assert all("detail" in entry for entry in report["broken"])
