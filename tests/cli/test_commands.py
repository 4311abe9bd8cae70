"""Every `cadence-store` command, on SQLite files and on the embedded default store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cadence_store import RunStore
from cadence_store.cli import main
from cadence_store.cli.group import default_root_hash
from cadence_store.errors import SchemaOutOfDateError
from cadence_store.storage.schema import head_revision

COMMANDS = [
    [],
    ["upgrade"],
    ["info"],
    ["runs"],
    ["show"],
    ["events"],
    ["verify"],
    ["export"],
    ["import"],
    ["copy"],
    ["start"],
    ["bind-change"],
    ["transition"],
    ["bind-delivery"],
    ["lease"],
    ["lease", "acquire"],
    ["lease", "renew"],
    ["lease", "commit"],
    ["lease", "interrupt"],
    ["lease", "status"],
    ["demo"],
    ["follow"],
    ["serve"],
    ["keygen"],
    ["checkpoint"],
    ["prove"],
    ["archive"],
]

RECEIPT = "a" * 64
PAUSED_RUN = "fec8a140-7996-4634-a993-25c77fa10153"  # design-bound-paused, 5 events
LEASED_RUN = "8ffecc31-80bd-4ba5-88d6-963b08ad4b23"  # implement-bound-running, leases


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "main")
def test_every_command_has_help_with_an_example(cli: Any, command: list[str]) -> None:
    result = cli(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Example: cadence-store" in result.stdout


def test_every_registered_command_is_covered_by_the_help_test() -> None:
    names = {name for name in main.commands}
    lease_group: Any = main.commands["lease"]
    names |= {f"lease {name}" for name in lease_group.commands}
    covered = {" ".join(c) for c in COMMANDS if c}
    assert names <= covered


def test_upgrade_creates_and_reports_head(cli: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/new.sqlite3"
    result = cli("upgrade", "--url", url)
    assert result.exit_code == 0, result.output
    assert f"is at {head_revision()} (head)" in result.stdout
    again = cli("upgrade", "--url", url)
    assert again.exit_code == 0 and again.stdout == result.stdout


def test_upgrade_adopts_a_cadence_1x_store(cli: Any, tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x"
    target = tmp_path / "v4.sqlite3"
    target.write_bytes((fixtures / "legacy-v4.sqlite3").read_bytes())
    result = cli("upgrade", "--url", f"sqlite:///{target}")
    assert result.exit_code == 0, result.output
    assert "(head)" in result.stdout


def test_upgrade_embedded_default(cli: Any, isolated: Any) -> None:
    result = cli("upgrade")
    assert result.exit_code == 0, result.output
    assert str(isolated.state) in result.stdout
    assert list(isolated.cwd.iterdir()) == []


def test_info_on_fixture(cli: Any, fixture_url: str) -> None:
    result = cli("info", "--url", fixture_url, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["engine"] == "sqlite (pysqlite)"
    assert info["revision"] == info["head"] and info["atHead"] is True
    assert info["runs"] == 8 and info["events"] == 25
    table = cli("info", "--url", fixture_url)
    assert f"{head_revision()} (head)" in table.stdout
    assert "runs" in table.stdout and "25" in table.stdout


def test_info_embedded_default(cli: Any, isolated: Any) -> None:
    assert cli("upgrade").exit_code == 0
    result = cli("info", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["path"].startswith(str(isolated.state))
    assert info["consumerRoot"] == str(isolated.cwd.resolve())
    assert info["rootHash"] == default_root_hash()
    assert info["runs"] == 0


def test_not_at_head_says_to_upgrade(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "plain.sqlite3"
    sqlite3.connect(path).close()
    url = f"sqlite:///{path}"
    for command in (
        ["runs"],
        ["show", "x"],
        ["verify"],
        ["export"],
        ["start", "--stage", "abel-design", "--operation-id", "s1", "--change", "c"],
    ):
        result = cli(*command, "--url", url)
        assert result.exit_code == 3, (command, result.output)
        assert "error: run-store-upgrade-required" in result.stderr
        assert "cadence-store upgrade --url" in result.stderr
        assert "Traceback" not in result.output
    info = cli("info", "--url", url)
    assert info.exit_code == 3
    assert "upgrade required" in info.stdout
    assert "cadence-store upgrade" in info.stderr


def test_missing_sqlite_file_is_not_created(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "typo.sqlite3"
    url = f"sqlite:///{path}"
    for command in (["runs"], ["info"], ["export"], ["verify"], ["show", "x"]):
        result = cli(*command, "--url", url)
        assert result.exit_code == 3, (command, result.output)
        # the code the API gives the same case
        assert "error: run-store-upgrade-required" in result.stderr
        assert "does not exist" in result.stderr
        assert "cadence-store upgrade --url" in result.stderr
    copied = cli("copy", "--from", url, "--to", url)
    assert copied.exit_code == 3
    assert "error: run-store-upgrade-required" in copied.stderr
    with pytest.raises(SchemaOutOfDateError) as raised:
        RunStore(url)
    assert raised.value.code == "run-store-upgrade-required"
    assert not path.exists()


def test_env_url_selects_the_database(
    cli: Any, fixture_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CADENCE_STORE_URL", fixture_url)
    result = cli("runs", "--json")
    assert result.exit_code == 0, result.output
    assert len(lines(result.stdout)) == 8


def test_runs_filters(cli: Any, fixture_url: str, manifest: dict[str, Any]) -> None:
    result = cli("runs", "--url", fixture_url, "--json")
    stored = {json.loads(line)["runId"]: line for line in lines(result.stdout)}
    for run in manifest["runs"]:
        # --json prints the stored projection JSON as cadence 1.x wrote it
        assert stored[run["runId"]] == json.dumps(run["status"], separators=(",", ":"))
    created = cli("runs", "--url", fixture_url, "--json", "--state", "created")
    assert {json.loads(x)["state"] for x in lines(created.stdout)} == {"created"}
    assert len(lines(created.stdout)) == 2
    design = cli("runs", "--url", fixture_url, "--json", "--stage", "abel-design")
    assert {json.loads(x)["stage"] for x in lines(design.stdout)} == {"abel-design"}
    change = cli("runs", "--url", fixture_url, "--json", "--change", "add-login-flow")
    assert {json.loads(x)["runId"] for x in lines(change.stdout)} == {PAUSED_RUN, LEASED_RUN}
    both = cli(
        "runs",
        "--url",
        fixture_url,
        "--json",
        "--change",
        "add-login-flow",
        "--stage",
        "abel-design",
    )
    assert [json.loads(x)["runId"] for x in lines(both.stdout)] == [PAUSED_RUN]
    table = cli("runs", "--url", fixture_url, "--state", "paused", "--state", "running")
    assert table.exit_code == 0
    assert PAUSED_RUN in table.stdout and LEASED_RUN in table.stdout
    assert "operator-pause" in table.stdout
    assert "2 run(s)" in table.stdout
    bad = cli("runs", "--url", fixture_url, "--state", "sleeping")
    assert bad.exit_code == 2


def test_show(cli: Any, fixture_url: str, manifest: dict[str, Any]) -> None:
    result = cli("show", LEASED_RUN, "--url", fixture_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Delivery bindings" in out and "Operations" in out and "State timeline" in out
    assert "lease-running" in out and "live" in out and "2036-" in out
    assert "FENCE" in out
    assert "interrupted" in out
    as_json = json.loads(cli("show", LEASED_RUN, "--url", fixture_url, "--json").stdout)
    run = next(r for r in manifest["runs"] if r["runId"] == LEASED_RUN)
    assert as_json["status"] == run["status"]
    leases = {o["operationId"]: o for o in as_json["operations"]}
    assert leases["lease-running"]["lease"] == "live"
    assert leases["lease-running"]["expiresAt"] == 2083829460000
    assert leases["lease-running"]["fence"] == 1  # the adopted lease is grant 1
    assert leases["lease-interrupt"]["fence"] == 1
    assert leases["lease-interrupt"]["lease"] == "none"
    transitions = [e for e in run["events"] if e["type"] == "state-transitioned"]
    states = [step["state"] for step in as_json["timeline"]]
    assert states == ["created"] + [e["payload"]["to"] for e in transitions]
    bindings = as_json["deliveryBindings"]
    assert len(bindings) == len(run["status"]["deliveryBindings"])
    path = cli("show", PAUSED_RUN, "--url", fixture_url).stdout
    assert "path: created → " in path and "paused" in path and "operator-pause" in path


def test_events(cli: Any, fixture_url: str, manifest: dict[str, Any]) -> None:
    for run in manifest["runs"]:
        result = cli("events", run["runId"], "--url", fixture_url, "--json")
        assert result.exit_code == 0, result.output
        got = [json.loads(line) for line in lines(result.stdout)]
        assert got == run["events"]
        for line, event in zip(lines(result.stdout), got, strict=True):
            assert list(event) == ["sequence", "type", "payload", "priorHash", "hash"]
            assert line == json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    table = cli("events", PAUSED_RUN, "--url", fixture_url)
    assert table.exit_code == 0
    assert "run-created" in table.stdout and "state-transitioned" in table.stdout


def test_unknown_run_exits_2(cli: Any, fixture_url: str) -> None:
    for command in (["show", "nope"], ["events", "nope"], ["verify", "nope"]):
        result = cli(*command, "--url", fixture_url)
        assert result.exit_code == 2, (command, result.output)
        assert "error: run-not-found" in result.stderr
        assert "Traceback" not in result.output


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_operator_lifecycle_on_a_url(cli: Any, empty_url: str) -> None:
    url = ["--url", empty_url]
    started = _json(
        cli(
            "start",
            "--stage",
            "abel-implement",
            "--change",
            "add-login",
            "--operation-id",
            "start-1",
            *url,
        )
    )
    run_id = started["runId"]
    assert started["rootHash"] == default_root_hash() and started["state"] == "created"
    again = _json(
        cli(
            "start",
            "--stage",
            "abel-implement",
            "--change",
            "add-login",
            "--operation-id",
            "start-1",
            *url,
        )
    )
    assert again == started
    bound = _json(
        cli(
            "bind-delivery",
            run_id,
            "--gate",
            "gate-a",
            "--revision",
            "1",
            "--receipt-hash",
            RECEIPT,
            "--operation-id",
            "bind-1",
            "--approval-revision",
            "1",
            "--contract-hash",
            "b" * 64,
            "--record-hash",
            "c" * 64,
            *url,
        )
    )
    assert bound["deliveryBindings"][0]["approvalProof"]["contractHash"] == "b" * 64
    assert bound["deliveryRevision"] == 1
    for state in ("validating-delivery", "ready", "running"):
        moved = _json(cli("transition", run_id, state, "--operation-id", f"to-{state}", *url))
        assert moved["state"] == state

    lease = _json(cli("lease", "acquire", run_id, "apply-1", "--ttl-ms", "60000", *url))
    assert set(lease) == {"runId", "operationId", "token", "expiresAt", "fence"}
    assert lease["fence"] == 1
    replaced = _json(cli("lease", "acquire", run_id, "apply-1", "--preempt", *url))
    assert replaced["token"] != lease["token"]
    assert replaced["fence"] == 2
    fenced = cli(
        "transition", run_id, "paused", "--operation-id", "p1", "--lease", json.dumps(lease), *url
    )
    assert fenced.exit_code == 3  # a fenced lease: the store refused
    assert "error: lease-fenced" in fenced.stderr
    renewed = _json(
        cli("lease", "renew", "-", "--ttl-ms", "120000", *url, input=json.dumps(replaced))
    )
    assert renewed["token"] == replaced["token"]
    assert renewed["fence"] == replaced["fence"] == 2  # renewing keeps the fence
    assert renewed["expiresAt"] >= replaced["expiresAt"]
    status = _json(cli("lease", "status", run_id, "apply-1", *url))
    assert (status["state"], status["fence"]) == ("running", 2)
    moved = _json(
        cli(
            "transition",
            run_id,
            "paused",
            "--code",
            "operator-pause",
            "--operation-id",
            "p2",
            "--lease",
            json.dumps(renewed),
            *url,
        )
    )
    assert moved["pauseCode"] == "operator-pause"
    outcome = _json(
        cli("lease", "commit", json.dumps(renewed), "--outcome", '{"applied":true}', *url)
    )
    assert outcome == {"applied": True}
    assert _json(cli("lease", "status", run_id, "apply-1", *url))["state"] == "committed"

    other = _json(cli("lease", "acquire", run_id, "apply-2", *url))
    interrupted = _json(cli("lease", "interrupt", json.dumps(other), *url))
    assert interrupted["state"] == "interrupted"
    assert _json(cli("lease", "status", run_id, "apply-2", *url))["state"] == "interrupted"
    assert _json(cli("lease", "status", run_id, "never", *url)) is None

    verify = cli("verify", *url)
    assert verify.exit_code == 0 and "1 ok, 0 broken" in verify.stdout


def test_design_run_with_root_hash_and_bind_change(cli: Any, empty_url: str) -> None:
    url = ["--url", empty_url]
    key = "d" * 64
    started = _json(
        cli(
            "start",
            "--stage",
            "abel-design",
            "--provisional-key",
            key,
            "--alias",
            "e" * 64,
            "--root-hash",
            "f" * 64,
            "--operation-id",
            "s1",
            *url,
        )
    )
    assert started["rootHash"] == "f" * 64 and started["provisionalKey"] == key
    bound = _json(cli("bind-change", started["runId"], "new-api", "--operation-id", "b1", *url))
    assert bound["change"] == "new-api" and "provisionalKey" not in bound


def test_start_on_the_embedded_default(cli: Any, isolated: Any) -> None:
    started = _json(
        cli("start", "--stage", "abel-implement", "--change", "x", "--operation-id", "s1")
    )
    assert started["rootHash"] == default_root_hash()
    refused = cli(
        "start",
        "--stage",
        "abel-implement",
        "--change",
        "x",
        "--operation-id",
        "s1",
        "--root-hash",
        "f" * 64,
    )
    assert refused.exit_code == 2 and "--root-hash needs --url" in refused.output
    assert list(isolated.cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (
            ["start", "--stage", "abel-nothing", "--change", "x", "--operation-id", "s"],
            "invalid-run-stage",
        ),
        (
            ["start", "--stage", "abel-implement", "--change", "Bad Name", "--operation-id", "s"],
            "invalid-change",
        ),
        (
            ["start", "--stage", "abel-implement", "--change", "x", "--operation-id", "!"],
            "invalid-operation-id",
        ),
        (
            [
                "start",
                "--stage",
                "abel-implement",
                "--change",
                "x",
                "--operation-id",
                "s",
                "--root-hash",
                "nothex",
            ],
            "invalid-root-hash",
        ),
        (
            [
                "bind-delivery",
                "RUN",
                "--gate",
                "gate-z",
                "--revision",
                "1",
                "--receipt-hash",
                RECEIPT,
                "--operation-id",
                "b",
            ],
            "invalid-delivery-binding",
        ),
        (
            ["transition", "RUN", "paused", "--operation-id", "t", "--lease", "{not json"],
            "invalid-lease",
        ),
        (["lease", "acquire", "RUN", "op", "--ttl-ms", "0"], "invalid-lease-ttl"),
        (["lease", "commit", '{"runId":"r"}'], "invalid-lease"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_input_exits_2_with_its_code(
    cli: Any, empty_url: str, args: list[str], code: str
) -> None:
    result = cli(*args, "--url", empty_url)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {code}\n")
    assert len(result.stderr.splitlines()) <= 3
    assert "Traceback" not in result.output


def test_conflicting_operation_and_illegal_transition_exit_2(cli: Any, fixture_url: str) -> None:
    illegal = cli(
        "transition", PAUSED_RUN, "applying", "--operation-id", "x1", "--url", fixture_url
    )
    assert illegal.exit_code == 2
    assert "error: invalid-run-transition:paused:applying" in illegal.stderr
    reused = cli("lease", "acquire", LEASED_RUN, "impl-alpha-t1", "--url", fixture_url)
    assert reused.exit_code == 2, reused.output
    assert "error: operation-id-conflict" in reused.stderr


def test_usage_errors_exit_2(cli: Any, empty_url: str) -> None:
    assert cli("frobnicate").exit_code == 2
    assert cli("start", "--url", empty_url).exit_code == 2  # --stage missing
    partial_proof = cli(
        "bind-delivery",
        "RUN",
        "--gate",
        "gate-a",
        "--revision",
        "1",
        "--receipt-hash",
        RECEIPT,
        "--operation-id",
        "b",
        "--approval-revision",
        "1",
        "--url",
        empty_url,
    )
    assert partial_proof.exit_code == 2
    assert cli("verify", "RUN", "--file", "x.jsonl").exit_code == 2


def test_invalid_url_exits_2_without_echoing_it(cli: Any) -> None:
    result = cli("runs", "--url", "nonsense://user:hunter22@host/db")
    assert result.exit_code == 2, result.output
    assert "error: invalid-database-url" in result.stderr
    assert "hunter22" not in result.output


def test_store_written_by_the_cli_reads_back(cli: Any, empty_url: str) -> None:
    _json(
        cli(
            "start",
            "--stage",
            "abel-implement",
            "--change",
            "y",
            "--operation-id",
            "s",
            "--url",
            empty_url,
        )
    )
    with RunStore(empty_url) as store:
        (run_id,) = store.run_ids()
        assert store.verify_integrity(run_id).change == "y"
