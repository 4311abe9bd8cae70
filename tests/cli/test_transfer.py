"""`cadence-store export` / `import`: a cadence 1.x store through JSON Lines and back."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from cadence_store import OperationConflictError, RunStore, SchemaOutOfDateError
from cadence_store.errors import InvalidInputError, JournalIntegrityError
from cadence_store.storage.models import delivery_bindings, events, operations, runs
from cadence_store.transfer import export_store, import_store

RUN = "fec8a140-7996-4634-a993-25c77fa10153"


def export_file(cli: Any, url: str, tmp_path: Path) -> Path:
    out = tmp_path / "export.jsonl"
    result = cli("export", "--url", url, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "exported 8 run(s), 25 event(s)" in result.stderr
    return out


def table_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table.name: sorted(tuple(row) for row in connection.execute(select(table)))
                for table in (runs, events, operations, delivery_bindings)
            }
    finally:
        engine.dispose()


def test_export_then_import_reproduces_the_cadence_1x_store(
    cli: Any,
    fixture_url: str,
    empty_url: str,
    tmp_path: Path,
    manifest: dict[str, Any],
    matches_manifest: Any,
) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 8
    assert all(list(r) == ["run", "events", "operations", "deliveryBindings"] for r in records)
    manifest_ops = {
        # cadence 1.x's columns, plus the fence the adoption gave each lease
        (o["run_id"], o["operation_id"]): {**o, "lease_fence": 1 if o["kind"] == "lease" else None}
        for o in manifest["operations"]
    }
    exported_ops = {(o["run_id"], o["operation_id"]): o for r in records for o in r["operations"]}
    assert exported_ops == manifest_ops  # every column, outcome_json verbatim

    result = cli("import", str(out), "--url", empty_url)
    assert result.exit_code == 0, result.output
    assert "imported 8 run(s), 25 event(s)" in result.stdout
    matches_manifest(empty_url)
    assert table_rows(empty_url) == table_rows(fixture_url)

    # re-exported byte for byte
    again = io.StringIO()
    export_store(empty_url, again)
    assert again.getvalue() == out.read_text(encoding="utf-8")


def test_import_twice_is_a_no_op(
    cli: Any, fixture_url: str, empty_url: str, tmp_path: Path
) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    assert cli("import", str(out), "--url", empty_url).exit_code == 0
    before = table_rows(empty_url)
    second = cli("import", str(out), "--url", empty_url)
    assert second.exit_code == 0, second.output
    assert "imported 0 run(s), 0 event(s)" in second.stdout
    assert "8 already present and identical" in second.stdout
    assert table_rows(empty_url) == before
    # standard input works too
    third = cli("import", "-", "--url", empty_url, input=out.read_text(encoding="utf-8"))
    assert third.exit_code == 0 and "8 already present" in third.stdout


def test_import_of_a_conflicting_run_writes_nothing(
    cli: Any, fixture_url: str, empty_url: str, tmp_path: Path
) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    lines = out.read_text(encoding="utf-8").splitlines()
    seed_conflict(empty_url, lines)
    before = table_rows(empty_url)

    result = cli("import", str(out), "--url", empty_url)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: run-id-conflict\n")
    assert RUN in result.stderr and "nothing was written" in result.stderr
    assert table_rows(empty_url) == before

    with pytest.raises(OperationConflictError) as raised:
        import_store(empty_url, lines)
    assert raised.value.code == "run-id-conflict"
    assert table_rows(empty_url) == before


def seed_conflict(url: str, lines: list[str]) -> None:
    """Give the database run RUN with a different (shorter, still valid) history."""
    record = json.loads(next(line for line in lines if RUN in line))
    record["events"] = record["events"][:4]
    record["operations"] = [
        o for o in record["operations"] if o["operation_id"] != "design-alpha-t3"
    ]
    projection_json = _projection_after(record, 4)
    projection = json.loads(projection_json)
    record["run"].update(
        state=projection["state"],
        sequence=projection["sequence"],
        event_hash=projection["eventHash"],
        projection_json=projection_json,
    )
    assert import_store(url, [json.dumps(record)]).runs_written == 1


def _projection_after(record: dict[str, Any], sequence: int) -> str:
    """The stored outcome (projection JSON) recorded by the operation that reached `sequence`."""
    for operation in record["operations"]:
        outcome = operation["outcome_json"]
        if outcome and json.loads(outcome)["sequence"] == sequence:
            return str(outcome)
    raise AssertionError(f"no receipt at sequence {sequence}")


def test_a_bad_file_writes_nothing(
    cli: Any, fixture_url: str, empty_url: str, tmp_path: Path
) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    lines = out.read_text(encoding="utf-8").splitlines()

    # corruption in the last record: exit 1, not one run written
    record = json.loads(lines[-1])
    record["events"][0]["payload_json"] = record["events"][0]["payload_json"].replace("a", "b", 1)
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n", encoding="utf-8")
    result = cli("import", str(corrupt), "--url", empty_url)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: event-integrity-hash-chain\n")
    assert "sequence 1" in result.stderr
    assert table_rows(empty_url)["runs"] == []

    # an unparseable line: exit 2, nothing written
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("\n".join([*lines, "{oops"]) + "\n", encoding="utf-8")
    result = cli("import", str(garbled), "--url", empty_url)
    assert result.exit_code == 2, result.output
    assert "error: export-record-invalid" in result.stderr and "line 9" in result.stderr
    assert table_rows(empty_url)["runs"] == []

    with pytest.raises(InvalidInputError):
        import_store(empty_url, [*lines, lines[0]])  # a run twice
    with pytest.raises(JournalIntegrityError):
        import_store(empty_url, corrupt.read_text(encoding="utf-8").splitlines())
    assert table_rows(empty_url)["runs"] == []

    missing = cli("import", str(tmp_path / "nope.jsonl"), "--url", empty_url)
    assert missing.exit_code == 2 and "error: export-file-unreadable" in missing.stderr


def test_import_needs_a_database_at_head(cli: Any, tmp_path: Path, fixture_url: str) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    path = tmp_path / "old.sqlite3"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE host_table (id INTEGER)")
    engine.dispose()
    with pytest.raises(SchemaOutOfDateError):
        import_store(f"sqlite:///{path}", out.read_text(encoding="utf-8").splitlines())
    result = cli("import", str(out), "--url", f"sqlite:///{path}")
    assert result.exit_code == 3
    assert "cadence-store upgrade" in result.stderr


def test_export_to_stdout_and_the_embedded_default(cli: Any, isolated: Any) -> None:
    started = cli("start", "--stage", "abel-implement", "--change", "x", "--operation-id", "s")
    assert started.exit_code == 0, started.output
    result = cli("export")
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["run"]["change_name"] == "x"
    assert list(isolated.cwd.iterdir()) == []


def test_export_streams_runs_in_batches(fixture_url: str) -> None:
    out = io.StringIO()
    report = export_store(fixture_url, out, batch_size=3)
    assert report.runs_written == 8 and report.events_written == 25
    ids = [json.loads(line)["run"]["run_id"] for line in out.getvalue().splitlines()]
    assert ids == sorted(ids) and len(set(ids)) == 8
    with RunStore(fixture_url) as store:
        engine = store.engine
        with engine.connect() as connection:
            assert connection.execute(select(func.count()).select_from(runs)).scalar_one() == 8


def test_copy_command(cli: Any, fixture_url: str, empty_url: str, tmp_path: Path) -> None:
    out = export_file(cli, fixture_url, tmp_path)
    seed_conflict(empty_url, out.read_text(encoding="utf-8").splitlines())
    before = table_rows(empty_url)
    refused = cli("copy", "--from", fixture_url, "--to", empty_url)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("error: run-id-conflict\n") and RUN in refused.stderr
    assert table_rows(empty_url) == before

    outdated = tmp_path / "outdated.sqlite3"
    create_engine(f"sqlite:///{outdated}").connect().close()
    stale = cli("copy", "--from", fixture_url, "--to", f"sqlite:///{outdated}")
    assert stale.exit_code == 3 and "cadence-store upgrade" in stale.stderr

    fresh = tmp_path / "fresh.sqlite3"
    assert cli("upgrade", "--url", f"sqlite:///{fresh}").exit_code == 0
    copied = cli("copy", "--from", fixture_url, "--to", f"sqlite:///{fresh}", "--batch-size", "3")
    assert copied.exit_code == 0, copied.output
    assert "copied 8 run(s), 25 event(s)" in copied.stdout
    again = cli("copy", "--from", fixture_url, "--to", f"sqlite:///{fresh}")
    assert again.exit_code == 0
    assert "copied 0 run(s), 0 event(s)" in again.stdout
    assert "8 already present and identical" in again.stdout
    assert table_rows(f"sqlite:///{fresh}") == table_rows(fixture_url)


def test_export_to_an_unwritable_place(cli: Any, fixture_url: str, tmp_path: Path) -> None:
    result = cli("export", "--url", fixture_url, "--out", str(tmp_path / "no" / "such.jsonl"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: export-file-unwritable\n")
