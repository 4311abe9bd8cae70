"""What an owner of the database can do to the journal with plain SQL, and what a signed
checkpoint kept outside the database shows of it, on SQLite and PostgreSQL.

Each attack is made on a copy of one small store (four runs, two dozen events) whose
checkpoint note was written to a file before the attack. Where the attack keeps every
chain intact the test first shows that the plain `cadence-store verify` passes; then
`cadence-store verify --checkpoint FILE --vkey KEY` exits 1 naming the code, and
`RunStore.verify_checkpoint` raises the same `CheckpointError` code (the async store
too, for some attacks on each engine).

An edited payload is the one attack the chains themselves catch: its event hash no
longer matches, so every `verify` names the chain's code
(`event-integrity-hash-chain`) first, before the tree is looked at; the tree's leaves
hold event hashes, which the edit left alone.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from support import ROOT_HASH, FakeClock
from tamper_support import (
    ORIGIN,
    advance,
    delete_newest_event,
    delete_run,
    edit_payload,
    feed_order,
    flip_signature_byte,
    rewrite_history,
    run_events,
    start_runs,
    swap_feed_positions,
)

import cadence_store
from cadence_store import AsyncRunStore, RunStore
from cadence_store.async_store import async_database_url
from cadence_store.cli import main
from cadence_store.errors import CheckpointError, JournalIntegrityError
from cadence_store.journal import merkle
from cadence_store.journal.note_keys import SignerKey, generate_signer_key
from cadence_store.journal.notes import verify_checkpoint
from cadence_store.storage.feed_notifier import flush_notifiers

MISMATCH = "checkpoint-mismatch"
ROLLBACK = "checkpoint-rollback"
SIGNATURE_INVALID = "checkpoint-signature-invalid"
HASH_CHAIN = "event-integrity-hash-chain"


@dataclass(frozen=True)
class Template:
    """The module's store: `checkpointed` signed after every run advanced; `backup` copied
    before that, with fewer events."""

    engine: str
    checkpointed: str  # SQLite: a file path; PostgreSQL: a database name
    backup: str
    ids: dict[str, str]
    note: str
    size: int
    signer: SignerKey


@dataclass(frozen=True)
class Attacked:
    url: str
    template: Template
    note_file: Path

    @property
    def vkey(self) -> str:
        return str(self.template.signer.verifier())

    def ids(self, name: str) -> str:
        return self.template.ids[name]


def _build(url: str, signer: SignerKey, copy_backup: Callable[[], None]) -> dict[str, Any]:
    cadence_store.upgrade(url)
    clock = FakeClock()
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        ids = start_runs(store)
        advance(store, ids, range(2))
        flush_notifiers()
    copy_backup()
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        advance(store, ids, range(2, 6))
        signed = store.checkpoint(signer, origin=ORIGIN)
        flush_notifiers()
    return {"ids": ids, "note": signed.note, "size": signed.size}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ],
)
def template(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Template]:
    signer = generate_signer_key(ORIGIN)
    if request.param == "sqlite":
        directory = tmp_path_factory.mktemp("tamper-template")
        main_file, backup_file = directory / "store.sqlite3", directory / "backup.sqlite3"
        built = _build(
            f"sqlite:///{main_file}", signer, lambda: shutil.copyfile(main_file, backup_file)
        )
        yield Template("sqlite", str(main_file), str(backup_file), signer=signer, **built)
        return
    postgres_url: str = request.getfixturevalue("postgres_url")
    admin: Engine = request.getfixturevalue("_pg_admin_engine")
    main_db, backup_db = f"tamper_{secrets.token_hex(4)}", f"tamper_backup_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{main_db}"'))
    url = make_url(postgres_url).set(database=main_db).render_as_string(hide_password=False)

    def pg_backup() -> None:  # a copy of the whole database, as a restore would bring back
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{backup_db}" TEMPLATE "{main_db}"'))

    try:
        built = _build(url, signer, pg_backup)
        yield Template("postgresql", main_db, backup_db, signer=signer, **built)
    finally:
        with admin.connect() as connection:
            for name in (main_db, backup_db):
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _copy(template: Template, source: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh copy of one of the template's databases: its URL."""
    if template.engine == "sqlite":
        target = tmp_path / "attacked.sqlite3"
        shutil.copyfile(source, target)
        return f"sqlite:///{target}"
    postgres_url: str = request.getfixturevalue("postgres_url")
    admin: Engine = request.getfixturevalue("_pg_admin_engine")
    name = f"t_{secrets.token_hex(8)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{source}"'))
    request.addfinalizer(lambda: _drop(admin, name))
    return make_url(postgres_url).set(database=name).render_as_string(hide_password=False)


def _drop(admin: Engine, name: str) -> None:
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def attacked(template: Template, tmp_path: Path, request: pytest.FixtureRequest) -> Attacked:
    """A copy of the checkpointed store, and its checkpoint note in a file outside it."""
    note_file = tmp_path / "checkpoint.note"
    note_file.write_text(template.note, encoding="utf-8")
    return Attacked(_copy(template, template.checkpointed, tmp_path, request), template, note_file)


@pytest.fixture
def tamper(attacked: Attacked) -> Iterator[Callable[[Callable[[Connection], Any]], Any]]:
    """`tamper(lambda connection: ...)`: raw SQL on the attacked database, committed."""
    engine = create_engine(attacked.url)

    def run(attack: Callable[[Connection], Any]) -> Any:
        with engine.begin() as connection:
            return attack(connection)

    try:
        yield run
    finally:
        engine.dispose()


# -- the three ways to check -------------------------------------------------------------


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def plain_verify_passes(url: str) -> None:
    result = cli("verify", "--url", url)
    assert result.exit_code == 0, result.output


def checkpoint_verify(
    attacked: Attacked, note_file: Path | None = None, vkey: str | None = None
) -> Result:
    return cli(
        "verify",
        "--url",
        attacked.url,
        "--checkpoint",
        str(note_file or attacked.note_file),
        "--vkey",
        vkey or attacked.vkey,
    )


def cli_refuses(attacked: Attacked, codes: set[str], **kwargs: Any) -> str:
    """The checkpoint verify exits 1 naming one of `codes`: the one it named."""
    result = checkpoint_verify(attacked, **kwargs)
    assert result.exit_code == 1, result.output
    named = [code for code in codes if code in result.output]
    assert len(named) == 1, result.output
    return named[0]


def store_refuses(
    attacked: Attacked, note: str | None = None, vkey: str | None = None
) -> CheckpointError:
    with (
        RunStore(attacked.url, root_hash=ROOT_HASH) as store,
        pytest.raises(CheckpointError) as info,
    ):
        store.verify_checkpoint(note or attacked.template.note, vkey or attacked.vkey)
    return info.value


def async_store_refuses(attacked: Attacked) -> CheckpointError:
    async def check() -> CheckpointError:
        async with AsyncRunStore(async_database_url(attacked.url), root_hash=ROOT_HASH) as store:
            with pytest.raises(CheckpointError) as info:
                await store.verify_checkpoint(attacked.template.note, attacked.vkey)
        return info.value

    return asyncio.run(check())


# -- the store as signed, and grown ------------------------------------------------------


def test_the_untouched_store_verifies_against_its_checkpoint(attacked: Attacked) -> None:
    result = checkpoint_verify(attacked)
    assert result.exit_code == 0, result.output
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        report = store.verify_checkpoint(attacked.template.note, attacked.vkey)
    size = attacked.template.size
    assert (report.size, report.tree_size, report.runs_verified) == (size, size, 4)
    assert report.events_verified == size


def test_a_store_that_grew_after_the_checkpoint_verifies(attacked: Attacked) -> None:
    with RunStore(attacked.url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        store.transition(attacked.ids("short"), "queued", operation_id="grown-1")
        store.transition(attacked.ids("middle"), "running", operation_id="grown-2")
        flush_notifiers()
        grown = store.checkpoint(attacked.template.signer, origin=ORIGIN)
    assert grown.size == attacked.template.size + 2
    result = checkpoint_verify(attacked)
    assert result.exit_code == 0, result.output
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        report = store.verify_checkpoint(attacked.template.note, attacked.vkey)
    assert (report.size, report.tree_size) == (attacked.template.size, grown.size)


# -- attacks -----------------------------------------------------------------------------


def test_an_edited_payload_breaks_its_chain_first(attacked: Attacked, tamper: Any) -> None:
    run_id = attacked.ids("long")
    tamper(lambda c: edit_payload(c, run_id, 5))  # event 5: ready -> queued
    plain = cli("verify", "--url", attacked.url)
    assert plain.exit_code == 1 and HASH_CHAIN in plain.output, plain.output
    # the chain check runs before the tree's: its code is the one named
    assert cli_refuses(attacked, {HASH_CHAIN, MISMATCH}) == HASH_CHAIN
    with (
        RunStore(attacked.url, root_hash=ROOT_HASH) as store,
        pytest.raises(JournalIntegrityError) as info,
    ):
        store.verify_checkpoint(attacked.template.note, attacked.vkey)
    assert info.value.code == HASH_CHAIN, info.value


@pytest.mark.parametrize(
    ("newest_in_feed", "expected"),
    [
        # the run that wrote the feed's last event: the store now holds fewer leaves
        pytest.param(True, ROLLBACK, id="newest-in-feed"),
        # another run, whose newest event sits inside the signed tree: a leaf is missing
        pytest.param(False, MISMATCH, id="inside-the-tree"),
    ],
)
def test_a_deleted_newest_event_with_its_run_row_set_back(
    attacked: Attacked, tamper: Any, newest_in_feed: bool, expected: str
) -> None:
    def truncate(connection: Connection) -> tuple[str, int]:
        # (PostgreSQL numbers the feed after commits, in an order of its own)
        last_writer = feed_order(connection)[-1][0]
        others = [run_id for run_id in attacked.template.ids.values() if run_id != last_writer]
        run_id = last_writer if newest_in_feed else others[0]
        return run_id, delete_newest_event(connection, run_id).sequence

    run_id, deleted = tamper(truncate)
    plain_verify_passes(attacked.url)
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        assert store.status(run_id).sequence == deleted - 1
    assert cli_refuses(attacked, {ROLLBACK, MISMATCH}) == expected
    assert store_refuses(attacked).code == expected
    if not newest_in_feed:
        assert async_store_refuses(attacked).code == expected


def test_a_whole_run_deleted(attacked: Attacked, tamper: Any) -> None:
    def delete(connection: Connection) -> str:
        order = feed_order(connection)
        run_id = next(r for r, _, _ in order if r != order[-1][0])  # not the last writer
        delete_run(connection, run_id)
        return run_id

    run_id = tamper(delete)
    plain_verify_passes(attacked.url)
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        assert run_id not in store.run_ids()
    assert cli_refuses(attacked, {ROLLBACK, MISMATCH}) == MISMATCH
    assert store_refuses(attacked).code == MISMATCH


def test_two_events_feed_positions_swapped(attacked: Attacked, tamper: Any) -> None:
    def swap(connection: Connection) -> tuple[tuple[str, int], tuple[str, int]]:
        order = feed_order(connection)
        # two events of different runs, both inside the signed tree
        first, second = order[5], order[8]
        assert first[0] != second[0]
        swap_feed_positions(connection, first[:2], second[:2])
        return first, second

    first, second = tamper(swap)
    plain_verify_passes(attacked.url)
    assert cli_refuses(attacked, {ROLLBACK, MISMATCH}) == MISMATCH
    error = store_refuses(attacked)
    assert error.code == MISMATCH
    # the first departing leaf is the lower position, which now holds the second event
    assert (error.run_id, error.sequence) == (second[0], second[1]), error
    assert async_store_refuses(attacked).code == MISMATCH


def test_a_restored_backup_from_before_the_checkpoint(
    attacked: Attacked, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    template = attacked.template
    restored = Attacked(
        _copy(template, template.backup, tmp_path / "restore", request)
        if template.engine == "postgresql"
        else _restore_sqlite(template, attacked),
        template,
        attacked.note_file,
    )
    plain_verify_passes(restored.url)
    assert cli_refuses(restored, {ROLLBACK, MISMATCH}) == ROLLBACK
    assert store_refuses(restored).code == ROLLBACK
    assert async_store_refuses(restored).code == ROLLBACK


def _restore_sqlite(template: Template, attacked: Attacked) -> str:
    """The backup file copied over the attacked store's file, as a restore does."""
    path = make_url(attacked.url).database
    assert path is not None
    shutil.copyfile(template.backup, path)
    return attacked.url


def test_a_history_rewritten_with_recomputed_hashes(attacked: Attacked, tamper: Any) -> None:
    run_id = attacked.ids("long")

    def rewrite(connection: Connection) -> tuple[list[str], list[str]]:
        before = [event.event_hash for event in run_events(connection, run_id)]
        # event 7: running -> paused with a code; a different code from there on
        rewrite_history(connection, run_id, 7, {"code": "rewritten-pause"})
        return before, [event.event_hash for event in run_events(connection, run_id)]

    before, after = tamper(rewrite)
    assert before[:6] == after[:6] and before[6] != after[6] and before[7] != after[7]
    plain_verify_passes(attacked.url)
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        assert store.status(run_id).pause_code == "still-paused"
        assert store.list_events(run_id)[6].payload["code"] == "rewritten-pause"
    assert cli_refuses(attacked, {ROLLBACK, MISMATCH}) == MISMATCH
    error = store_refuses(attacked)
    assert error.code == MISMATCH
    assert (error.run_id, error.sequence) == (run_id, 7), error
    # nor does the store sign the rewritten history: it no longer extends its last head
    with (
        RunStore(attacked.url, root_hash=ROOT_HASH) as store,
        pytest.raises(CheckpointError) as info,
    ):
        store.checkpoint(attacked.template.signer, origin=ORIGIN)
    assert info.value.code == MISMATCH


def test_a_flipped_signature_byte(attacked: Attacked, tmp_path: Path) -> None:
    plain_verify_passes(attacked.url)
    flipped = flip_signature_byte(attacked.template.note)
    assert flipped != attacked.template.note
    flipped_file = tmp_path / "flipped.note"
    flipped_file.write_text(flipped, encoding="utf-8")
    code = cli_refuses(attacked, {SIGNATURE_INVALID, MISMATCH}, note_file=flipped_file)
    assert code == SIGNATURE_INVALID
    assert store_refuses(attacked, note=flipped).code == SIGNATURE_INVALID


def test_another_verifier_key(attacked: Attacked) -> None:
    other = str(generate_signer_key(ORIGIN).verifier())  # the same name, another key
    code = cli_refuses(attacked, {SIGNATURE_INVALID, MISMATCH}, vkey=other)
    assert code == SIGNATURE_INVALID
    assert store_refuses(attacked, vkey=other).code == SIGNATURE_INVALID


def test_a_rewrite_that_also_clears_the_stored_tree(attacked: Attacked, tamper: Any) -> None:
    """The stored tree and the checkpoints recorded in the store are the attacker's to
    change too: the note kept outside still refuses the rewritten store."""
    run_id = attacked.ids("long")

    def rewrite(connection: Connection) -> None:
        rewrite_history(connection, run_id, 7, {"code": "rewritten-pause"})
        connection.execute(text("DELETE FROM tree_tiles"))
        connection.execute(text("DELETE FROM checkpoints"))

    tamper(rewrite)
    plain_verify_passes(attacked.url)
    assert cli_refuses(attacked, {ROLLBACK, MISMATCH}) == MISMATCH
    assert store_refuses(attacked).code == MISMATCH

    # signed afresh (the key holder colluding, or fooled), the new head is a fork: no
    # consistency proof leads from the published note to it
    with RunStore(attacked.url, root_hash=ROOT_HASH) as store:
        forked = store.checkpoint(attacked.template.signer, origin=ORIGIN)
        proof = store.consistency_proof(attacked.template.size, forked.size)
    published = verify_checkpoint(attacked.template.note, attacked.vkey)
    assert forked.size == published.size
    with pytest.raises(CheckpointError) as info:
        merkle.verify_consistency(
            published.size, forked.size, published.root_hash, bytes.fromhex(forked.root_hash),
            list(proof.hashes),
        )  # fmt: skip
    assert info.value.code == MISMATCH


def test_the_console_script_exits_1_on_a_rewritten_store(attacked: Attacked, tamper: Any) -> None:
    """The installed `cadence-store` in a process of its own: the exit status an
    auditor's script sees, the code on standard error, and exit 0 before the attack."""
    script = shutil.which("cadence-store", path=str(Path(sys.executable).parent))
    assert script is not None, "the cadence-store console script is not installed"
    command = [script, "verify", "--url", attacked.url, "--checkpoint", str(attacked.note_file)]
    command += ["--vkey", attacked.vkey]
    before = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert before.returncode == 0, before.stderr
    run_id = attacked.ids("long")
    tamper(lambda c: rewrite_history(c, run_id, 7, {"code": "rewritten-pause"}))
    after = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert after.returncode == 1, after.stdout
    assert MISMATCH in after.stderr, after.stderr
