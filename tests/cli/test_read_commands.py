"""`info`, `runs` and `show` read through the public read methods (`list_runs`,
`run_detail`, `counts`), not queries of their own."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from typing import Any

import cadence_store
from cadence_store import RunStore
from cadence_store.journal.vocabulary import LeaseStanding

LEGACY_V4 = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x" / "legacy-v4.sqlite3"


def test_info_counts_every_table(cli: Any, fixture_url: str) -> None:
    result = cli("info", "--url", fixture_url, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    with RunStore(fixture_url) as store:
        counted = store.counts()
    assert (info["runs"], info["events"], info["operations"], info["bindings"]) == (
        counted.runs,
        counted.events,
        counted.operations,
        counted.bindings,
    )
    assert info["byState"] == counted.by_state
    table = cli("info", "--url", fixture_url).stdout
    assert re.search(rf"^ operations\s+{counted.operations}\s*$", table, re.M), table
    assert re.search(rf"^ bindings\s+{counted.bindings}\s*$", table, re.M), table


def test_info_counts_only_a_store_at_head(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "legacy-v4.sqlite3"
    shutil.copyfile(LEGACY_V4, path)
    before = path.read_bytes()
    result = cli("info", "--url", f"sqlite:///{path}", "--json")
    assert result.exit_code == 3  # not at head: upgrade required
    info = json.loads(result.stdout)
    assert info["atHead"] is False
    assert "runs" not in info  # the read side refuses a store until it is upgraded
    assert path.read_bytes() == before


def test_runs_checks_its_filters(cli: Any, fixture_url: str) -> None:
    bad_change = cli("runs", "--url", fixture_url, "--change", "Not A Change")
    assert bad_change.exit_code == 2
    assert "error: invalid-change" in bad_change.stderr
    bad_root = cli("runs", "--url", fixture_url, "--root-hash", "abc")
    assert bad_root.exit_code == 2
    assert "error: invalid-root-hash" in bad_root.stderr


def test_runs_lists_by_stage_then_run_id(cli: Any, fixture_url: str) -> None:
    listed = [
        json.loads(line) for line in cli("runs", "--url", fixture_url, "--json").stdout.split()
    ]
    order = [(run["stage"], run["runId"]) for run in listed]
    with RunStore(fixture_url) as store:
        assert order == sorted((run.stage, run.run_id) for run in store.list_runs())


def test_show_is_the_run_detail(cli: Any, fixture_url: str) -> None:
    with RunStore(fixture_url) as store:
        run_ids = store.run_ids()
        details = {run_id: store.run_detail(run_id) for run_id in run_ids}
    for run_id, detail in details.items():
        shown = json.loads(cli("show", run_id, "--url", fixture_url, "--json").stdout)
        assert shown["status"] == detail.projection.document()
        assert shown["deliveryBindings"] == [b.to_dict() for b in detail.delivery_bindings]
        assert shown["timeline"] == [step.to_dict() for step in detail.timeline]
        assert [
            (o["operationId"], o["kind"], o["state"], o["expiresAt"]) for o in shown["operations"]
        ] == [(o.operation_id, o.kind, o.state, o.expires_at) for o in detail.operations]
        assert {o["lease"] for o in shown["operations"]} <= {
            LeaseStanding.LIVE,
            LeaseStanding.EXPIRED,
            LeaseStanding.NONE,
        }


def test_cli_reads_through_the_public_api() -> None:
    """The whole `cadence_store/cli/` package: no table of `models`, no SQL built, and of
    SQLAlchemy nothing but its URL parsing and errors."""
    package = Path(cadence_store.__file__).resolve().parent / "cli"
    modules = sorted(package.glob("*.py"))
    assert {path.name for path in modules} >= {
        "__init__.py",
        "inspect.py",
        "verify.py",
        "transfer.py",
        "operate.py",
        "lease.py",
        "render.py",
        "demo.py",
    }
    allowed_sqlalchemy = {
        "sqlalchemy": {"Engine"},  # an annotation
        "sqlalchemy.engine": {"URL"},  # an annotation (URLs parse with the store's parser)
        "sqlalchemy.exc": {"ArgumentError", "SQLAlchemyError"},
    }
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"), path.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("sqlalchemy"), (path.name, alias.name)
                    assert "models" not in alias.name.split("."), (path.name, alias.name)
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                imported = {alias.name for alias in node.names}
                assert "models" not in module.split(".") and "models" not in imported, (
                    path.name,
                    module,
                )
                if module.startswith("sqlalchemy"):
                    assert imported <= allowed_sqlalchemy.get(module, set()), (path.name, imported)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                # no statement built or run by hand
                assert node.func.attr not in {
                    "execute",
                    "exec_driver_sql",
                    "select",
                    "scalar",
                    "scalars",
                }, (path.name, node.lineno)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.match(
                    r"\s*(SELECT|INSERT|UPDATE|DELETE|PRAGMA|CREATE)\b", node.value
                ), (path.name, node.lineno)
