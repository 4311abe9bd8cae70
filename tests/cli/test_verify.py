"""`cadence-store verify` on tampered stores, and `verify --file` on export files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from cadence_store.transfer import check_record, parse_record, verify_export

RUN = "fec8a140-7996-4634-a993-25c77fa10153"  # design-bound-paused: 5 events
OTHER = "8ffecc31-80bd-4ba5-88d6-963b08ad4b23"


def _path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def tamper_payload(db: sqlite3.Connection) -> None:
    db.execute(
        "UPDATE events SET payload_json = replace(payload_json, 'operator-pause', 'operator-paws')"
        " WHERE run_id = ? AND sequence = 5",
        (RUN,),
    )


def tamper_order(db: sqlite3.Connection) -> None:
    db.execute("UPDATE events SET sequence = -1 WHERE run_id = ? AND sequence = 3", (RUN,))
    db.execute("UPDATE events SET sequence = 3 WHERE run_id = ? AND sequence = 4", (RUN,))
    db.execute("UPDATE events SET sequence = 4 WHERE run_id = ? AND sequence = -1", (RUN,))


def tamper_delete(db: sqlite3.Connection) -> None:
    db.execute("DELETE FROM events WHERE run_id = ? AND sequence = 3", (RUN,))


def tamper_projection(db: sqlite3.Connection) -> None:
    db.execute(
        "UPDATE runs SET projection_json = replace(projection_json, '\"operator-pause\"',"
        " '\"operator-resume\"') WHERE run_id = ?",
        (RUN,),
    )


CASES: list[tuple[str, Callable[[sqlite3.Connection], None], str, list[str]]] = [
    ("payload", tamper_payload, "sequence 5", ["hash: expected", "stored f43370c783d7"]),
    ("order", tamper_order, "sequence 3", ["priorHash: expected"]),
    ("deleted", tamper_delete, "sequence 3", ["sequence: expected 3, stored 4", "missing"]),
    (
        "projection",
        tamper_projection,
        "sequence 5",
        ["projection.pauseCode: expected operator-pause, stored operator-resume"],
    ),
]


@pytest.mark.parametrize(
    ("name", "tamper", "sequence", "details"), CASES, ids=[c[0] for c in CASES]
)
def test_verify_names_the_broken_run_and_sequence(
    cli: Any,
    fixture_url: str,
    name: str,
    tamper: Callable[[sqlite3.Connection], None],
    sequence: str,
    details: list[str],
) -> None:
    before = cli("verify", "--url", fixture_url)
    assert before.exit_code == 0, before.output
    assert "8 ok, 0 broken" in before.stdout
    with sqlite3.connect(_path(fixture_url)) as db:
        tamper(db)
    db.close()
    result = cli("verify", "--url", fixture_url)
    assert result.exit_code == 1, result.output
    broken = [line for line in result.stdout.splitlines() if line.startswith("BROKEN")]
    assert len(broken) == 1, result.stdout
    assert broken[0].startswith(f"BROKEN run {RUN}: {sequence}: ")
    for detail in details:
        assert detail in broken[0]
    assert "7 ok, 1 broken" in result.stdout
    # naming runs verifies just those
    assert cli("verify", OTHER, "--url", fixture_url).exit_code == 0
    assert cli("verify", RUN, OTHER, "--url", fixture_url).exit_code == 1


def test_verify_on_postgresql_tampered_with_sqlalchemy(
    cli: Any, fixture_url: str, pg_database_url: str
) -> None:
    assert cli("upgrade", "--url", pg_database_url).exit_code == 0
    copied = cli("copy", "--from", fixture_url, "--to", pg_database_url)
    assert copied.exit_code == 0, copied.output
    engine = create_engine(pg_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE events SET payload_json = replace(payload_json, 'paused', 'Paused')"
                    " WHERE run_id = :run AND sequence = 5"
                ),
                {"run": RUN},
            )
    finally:
        engine.dispose()
    result = cli("verify", "--url", pg_database_url)
    assert result.exit_code == 1, result.output
    assert f"BROKEN run {RUN}: sequence 5: hash: expected" in result.stdout


def _export(cli: Any, url: str, tmp_path: Path) -> Path:
    out = tmp_path / "runs.jsonl"
    result = cli("export", "--url", url, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_verify_file_passes_on_an_export(cli: Any, fixture_url: str, tmp_path: Path) -> None:
    out = _export(cli, fixture_url, tmp_path)
    result = cli("verify", "--file", str(out))
    assert result.exit_code == 0, result.output
    assert "8 ok, 0 broken" in result.stdout
    stdin = cli("verify", "--file", "-", input=out.read_text(encoding="utf-8"))
    assert stdin.exit_code == 0 and "8 ok" in stdin.stdout


def _edit(out: Path, run_id: str, edit: Callable[[dict[str, Any]], None]) -> None:
    lines = out.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line)
        if record["run"]["run_id"] == run_id:
            edit(record)
            lines[index] = json.dumps(record, separators=(",", ":"))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_verify_file_fails_on_an_edited_payload(cli: Any, fixture_url: str, tmp_path: Path) -> None:
    out = _export(cli, fixture_url, tmp_path)

    def edit(record: dict[str, Any]) -> None:
        event = record["events"][1]
        event["payload_json"] = event["payload_json"].replace("add-login-flow", "add-logout-flow")

    _edit(out, RUN, edit)
    result = cli("verify", "--file", str(out))
    assert result.exit_code == 1, result.output
    assert f"BROKEN run {RUN}: line " in result.stdout
    assert "sequence 2: hash: expected" in result.stdout
    assert "7 ok, 1 broken" in result.stdout


def test_verify_file_fails_on_an_edited_projection_and_a_garbled_line(
    cli: Any, fixture_url: str, tmp_path: Path
) -> None:
    out = _export(cli, fixture_url, tmp_path)

    def edit(record: dict[str, Any]) -> None:
        record["run"]["projection_json"] = record["run"]["projection_json"].replace(
            '"paused"', '"running"'
        )

    _edit(out, RUN, edit)
    with out.open("a", encoding="utf-8") as handle:
        handle.write('{"run": "not a run"}\n')
    result = cli("verify", "--file", str(out))
    assert result.exit_code == 1, result.output
    assert "projection.state: expected paused, stored running" in result.stdout
    assert "export-record-invalid" in result.stdout
    assert "7 ok, 2 broken" in result.stdout


def test_verify_file_needs_no_database(
    cli: Any, fixture_url: str, tmp_path: Path, isolated: Any
) -> None:
    out = _export(cli, fixture_url, tmp_path)
    result = cli("verify", "--file", str(out), "--url", "postgresql+psycopg://nobody@/nowhere")
    assert result.exit_code == 0, result.output
    assert list(isolated.state.iterdir()) == []  # the embedded store was not opened either


def test_verify_export_results_name_sequence_and_difference(
    cli: Any, fixture_url: str, tmp_path: Path
) -> None:
    out = _export(cli, fixture_url, tmp_path)
    lines = out.read_text(encoding="utf-8").splitlines()
    results = verify_export(lines)
    assert [r.ok for r in results] == [True] * 8
    record = parse_record(next(line for line in lines if RUN in line))
    record["events"][2]["event_hash"] = "0" * 64
    check = check_record(record)
    assert not check.ok and check.run_id == RUN and check.sequence == 3
    assert check.field == "hash" and check.stored == "0" * 64
    assert check.code == "event-integrity-hash-chain"
