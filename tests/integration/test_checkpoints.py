"""Signed checkpoints of the journal feed's tree, on both engines: sign, record, verify
against the events, prove inclusion and consistency; the refusals; what a checkpoint
reads and writes (proportional to the events since the last one)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from support import ROOT_HASH, FakeClock, signer_seed

from cadence_store import (
    CheckpointError,
    InvalidInputError,
    RunNotFoundError,
    RunStore,
    SignedCheckpoint,
    generate_signer_key,
)
from cadence_store.journal import merkle
from cadence_store.journal.notes import parse_checkpoint, parse_note, verify_checkpoint
from cadence_store.storage.feed_notifier import flush_notifiers

KEY = generate_signer_key("example.com/runs")
VKEY = KEY.verifier()


def grow(store: RunStore, runs: int, prefix: str, transitions: int = 0) -> list[str]:
    """`runs` new runs (one event each), plus `transitions` events on the first."""
    ids = [
        store.start_run(
            "abel-implement", change=f"{prefix}-{i}", operation_id=f"{prefix}-s{i}"
        ).run_id
        for i in range(runs)
    ]
    moves = ["validating-delivery", "paused"]
    for i in range(transitions):
        store.transition(ids[0], moves[i % 2], operation_id=f"{prefix}-t{i}")
    return ids


def feed_leaves(db: Engine) -> list[bytes]:
    """Every numbered event's leaf hash, in position order, read directly."""
    flush_notifiers()
    with db.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT run_id, sequence, event_hash FROM events"
                " WHERE feed_position IS NOT NULL ORDER BY feed_position"
            )
        ).all()
    return [
        merkle.feed_leaf_hash(run_id, sequence, event_hash) for run_id, sequence, event_hash in rows
    ]


def root_of_note(note: str) -> tuple[int, bytes]:
    checkpoint = verify_checkpoint(note, VKEY)
    return checkpoint.size, checkpoint.root_hash


def test_a_checkpoint_round_trips_and_names_the_feeds_root(store: RunStore, db: Engine) -> None:
    grow(store, 5, "a", transitions=4)
    signed = store.checkpoint(KEY)
    assert isinstance(signed, SignedCheckpoint)
    leaves = feed_leaves(db)
    assert signed.size == len(leaves) == 9
    assert signed.root_hash == merkle.root_of(leaves).hex()
    assert signed.origin == KEY.name  # the default origin: the key's name
    checkpoint = verify_checkpoint(signed.note, VKEY)
    assert (checkpoint.origin, checkpoint.size, checkpoint.root_hash.hex()) == (
        KEY.name,
        9,
        signed.root_hash,
    )
    report = store.verify_checkpoint(signed.note, str(VKEY))
    assert (report.size, report.root_hash, report.tree_size) == (9, signed.root_hash, 9)
    assert (report.runs_verified, report.events_verified) == (5, 9)


def test_the_note_is_recorded_with_its_origin(store: RunStore, db: Engine) -> None:
    grow(store, 2, "o")
    signed = store.checkpoint(KEY.encode(), origin="runs.example.com/log")
    assert parse_checkpoint(parse_note(signed.note).text).origin == "runs.example.com/log"
    with db.connect() as connection:
        rows = connection.execute(
            text("SELECT checkpoint_id, tree_size, origin, root_hash, note FROM checkpoints")
        ).all()
    assert [tuple(row) for row in rows] == [
        (1, 2, "runs.example.com/log", signed.root_hash, signed.note)
    ]


def test_a_store_that_grew_still_verifies_its_old_checkpoints(store: RunStore, db: Engine) -> None:
    grow(store, 3, "g1")
    first = store.checkpoint(KEY)
    grow(store, 300, "g2", transitions=3)
    flush_notifiers()  # PostgreSQL numbers just after each commit; the report counts those
    report = store.verify_checkpoint(first.note, VKEY)
    assert (report.size, report.tree_size) == (3, 306)
    second = store.checkpoint(KEY)
    assert second.size == 306
    assert second.root_hash == merkle.root_of(feed_leaves(db)).hex()
    grow(store, 1, "g3")  # after the newest checkpoint too
    flush_notifiers()
    for note in (first.note, second.note):
        assert store.verify_checkpoint(note, VKEY).tree_size == 307


def test_a_checkpoint_numbers_what_is_left_unnumbered(store: RunStore, db: Engine) -> None:
    grow(store, 6, "n")
    flush_notifiers()
    with db.begin() as connection:  # as a writer that died between commit and numbering
        connection.execute(text("UPDATE events SET feed_position = NULL WHERE feed_position > 2"))
    signed = store.checkpoint(KEY)
    assert signed.size == 6
    assert signed.root_hash == merkle.root_of(feed_leaves(db)).hex()
    assert store.verify_checkpoint(signed.note, VKEY).tree_size == 6


def test_an_empty_store_signs_the_empty_tree(store: RunStore) -> None:
    signed = store.checkpoint(KEY)
    assert (signed.size, signed.root_hash) == (0, merkle.EMPTY_ROOT.hex())
    assert store.verify_checkpoint(signed.note, VKEY).tree_size == 0


def test_inclusion_proofs_verify_with_the_note_and_the_key_alone(
    store: RunStore, db: Engine
) -> None:
    ids: list[str] = []
    notes = []
    for batch, runs in enumerate((1, 2, 5, 9)):  # sizes 1, 3, 8, 17
        ids += grow(store, runs, f"p{batch}")
        notes.append(store.checkpoint(KEY).note)
    flush_notifiers()
    with db.connect() as connection:
        events = connection.execute(
            text("SELECT run_id, sequence, feed_position FROM events ORDER BY feed_position")
        ).all()
    for note in notes:
        size, root = root_of_note(note)
        for run_id, sequence, position in events:
            if position > size:
                with pytest.raises(InvalidInputError) as outside:
                    store.inclusion_proof(run_id, sequence, size=size)
                assert outside.value.code == "leaf-not-in-tree"
                continue
            proof = store.inclusion_proof(run_id, sequence, size=size)
            assert (proof.tree_size, proof.leaf_index) == (size, position - 1)
            assert proof.checkpoint == note
            merkle.verify_inclusion(
                proof.leaf_hash, proof.leaf_index, size, list(proof.hashes), root
            )
            document = proof.to_json()
            assert document["leaf"] == {
                "runId": run_id,
                "sequence": sequence,
                "eventHash": proof.event_hash,
            }
            assert set(document) == {
                "origin",
                "treeSize",
                "leafIndex",
                "leaf",
                "hashes",
                "checkpoint",
            }
    newest = store.inclusion_proof(ids[-1])  # defaults: the newest event, the newest checkpoint
    # runs started in the same millisecond and numbered together are placed by run id,
    # so the last run started need not hold the last position
    (position,) = [at for run_id, sequence, at in events if (run_id, sequence) == (ids[-1], 1)]
    assert (newest.tree_size, newest.leaf_index, newest.sequence) == (17, position - 1, 1)


def test_consistency_proofs_between_recorded_checkpoints(store: RunStore) -> None:
    heads = [store.checkpoint(KEY)]
    for batch, runs in enumerate((1, 4, 3, 300)):
        grow(store, runs, f"c{batch}")
        heads.append(store.checkpoint(KEY))
    for old in heads:
        for new in heads:
            if old.size > new.size:
                continue
            proof = store.consistency_proof(old.size, new.size)
            merkle.verify_consistency(
                old.size,
                new.size,
                bytes.fromhex(old.root_hash),
                bytes.fromhex(new.root_hash),
                list(proof.hashes),
            )
            assert proof.to_json()["oldSize"] == old.size
    with pytest.raises(InvalidInputError) as beyond:
        store.consistency_proof(1, heads[-1].size + 1)
    assert beyond.value.code == "invalid-tree-size"


def test_proof_requests_that_cannot_be_answered(store: RunStore) -> None:
    (run_id,) = grow(store, 1, "e")
    with pytest.raises(InvalidInputError) as none_yet:
        store.inclusion_proof(run_id)
    assert none_yet.value.code == "checkpoint-not-found"
    store.checkpoint(KEY)
    with pytest.raises(RunNotFoundError):
        store.inclusion_proof("no-such-run")
    with pytest.raises(InvalidInputError) as unsigned_size:
        store.inclusion_proof(run_id, size=7)
    assert unsigned_size.value.code == "checkpoint-not-found"
    with pytest.raises(InvalidInputError) as no_event:
        store.inclusion_proof(run_id, 2)
    assert no_event.value.code == "leaf-not-in-tree"
    store.transition(run_id, "paused", operation_id="e-pause")
    with pytest.raises(InvalidInputError) as after:
        store.inclusion_proof(run_id)  # its newest event came after the checkpoint
    assert after.value.code == "leaf-not-in-tree"


def _set_event_hash(db: Engine, run_id: str, sequence: int, value: str) -> None:
    with db.begin() as connection:
        connection.execute(
            text("UPDATE events SET event_hash = :value WHERE run_id = :run AND sequence = :seq"),
            {"value": value, "run": run_id, "seq": sequence},
        )


def test_the_store_refuses_to_sign_a_tree_that_no_longer_holds_its_last_head(
    store: RunStore, db: Engine, rejected: Callable[..., Any]
) -> None:
    ids = grow(store, 4, "m")
    store.checkpoint(KEY)
    grow(store, 2, "m2")
    _set_event_hash(db, ids[1], 1, "f" * 64)
    with rejected(CheckpointError, "checkpoint-mismatch") as refused:
        store.checkpoint(KEY)
    assert (refused.value.run_id, refused.value.sequence) == (ids[1], 1)


def test_altered_stored_hashes_are_refused_too(
    store: RunStore, db: Engine, rejected: Callable[..., Any]
) -> None:
    grow(store, 3, "t")
    store.checkpoint(KEY)
    with db.begin() as connection:
        connection.execute(
            text("UPDATE tree_tiles SET hashes = :hashes WHERE tile_level = 0"),
            {"hashes": bytes(96)},
        )
    with rejected(CheckpointError, "checkpoint-mismatch"):
        store.checkpoint(KEY)


def test_verification_names_the_first_event_that_departs(store: RunStore, db: Engine) -> None:
    ids = grow(store, 600, "v")  # three tiles of leaves: the edit is outside the right edge
    signed = store.checkpoint(KEY)
    _set_event_hash(db, ids[10], 1, "e" * 64)
    with pytest.raises(CheckpointError) as mismatch:
        store.verify_checkpoint(signed.note, VKEY)
    assert mismatch.value.code == "checkpoint-mismatch"
    assert (mismatch.value.run_id, mismatch.value.sequence) == (ids[10], 1)
    assert mismatch.value.expected == signed.root_hash


def test_an_altered_upper_tile_is_found_by_verification(
    store: RunStore, db: Engine, rejected: Callable[..., Any]
) -> None:
    grow(store, 300, "u")  # one full tile of leaves: its root is on tile level 1
    signed = store.checkpoint(KEY)
    with db.begin() as connection:
        connection.execute(
            text("UPDATE tree_tiles SET hashes = :hashes WHERE tile_level = 1"),
            {"hashes": bytes(32)},
        )
    with pytest.raises(CheckpointError) as mismatch:
        store.verify_checkpoint(signed.note, VKEY)  # the events still have the signed root
    assert mismatch.value.code == "checkpoint-mismatch"
    assert "NodeId(level=8, index=0)" in str(mismatch.value)
    with rejected(CheckpointError, "checkpoint-mismatch"):
        store.checkpoint(KEY)


def test_a_store_with_fewer_leaves_is_a_rollback(store: RunStore, db: Engine) -> None:
    (run_id,) = grow(store, 1, "r", transitions=2)
    signed = store.checkpoint(KEY)
    flush_notifiers()
    with db.begin() as connection:  # the newest event deleted and the head set back
        connection.execute(
            text("DELETE FROM events WHERE run_id = :run AND sequence = 3"), {"run": run_id}
        )
        head = connection.execute(
            text("SELECT event_hash FROM events WHERE run_id = :run AND sequence = 2"),
            {"run": run_id},
        ).scalar_one()
        connection.execute(
            text("UPDATE runs SET sequence = 2, event_hash = :head WHERE run_id = :run"),
            {"head": head, "run": run_id},
        )
    with pytest.raises(CheckpointError) as rollback:
        store.verify_checkpoint(signed.note, VKEY)
    assert rollback.value.code == "checkpoint-rollback"
    assert (rollback.value.expected, rollback.value.actual) == (3, 2)
    with pytest.raises(CheckpointError) as refused:
        store.checkpoint(KEY)
    assert refused.value.code == "checkpoint-rollback"


def test_another_key_or_a_flipped_signature_is_refused(store: RunStore) -> None:
    grow(store, 2, "k")
    signed = store.checkpoint(KEY)
    with pytest.raises(CheckpointError) as other:
        store.verify_checkpoint(signed.note, generate_signer_key(KEY.name).verifier())
    assert other.value.code == "checkpoint-signature-invalid"
    body, _, line = signed.note.rstrip("\n").rpartition("\n")
    name, encoded = line.rsplit(" ", 1)
    flipped = encoded[:-6] + ("A" if encoded[-6] != "A" else "B") + encoded[-5:]
    with pytest.raises(CheckpointError) as broken:
        store.verify_checkpoint(f"{body}\n{name} {flipped}\n", VKEY)
    assert broken.value.code == "checkpoint-signature-invalid"


def test_a_bad_signer_key_is_refused_without_echoing_it(store: RunStore) -> None:
    secret = KEY.encode()
    for bad in (secret[:-4] + "AAAA", secret.replace("PRIVATE+KEY+", ""), 42):
        with pytest.raises(InvalidInputError) as invalid:
            store.checkpoint(bad)  # type: ignore[arg-type]
        assert invalid.value.code == "checkpoint-key-invalid"
        assert signer_seed(secret)[:20] not in str(invalid.value)
    assert signer_seed(secret) not in repr(KEY)


# -- what a checkpoint reads and writes -------------------------------------------------


class StatementLog:
    """The statements a host engine's store runs (its listeners see the store's too)."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[tuple[str, Any]] = []
        self.rows_read = 0
        event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, _c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        self.statements.append((statement, parameters))

    def clear(self) -> None:
        self.statements.clear()

    def matching(self, *words: str) -> list[tuple[str, Any]]:
        return [(sql, params) for sql, params in self.statements if all(w in sql for w in words)]


@pytest.fixture
def logged_store(store_url: str, clock: FakeClock) -> Iterator[tuple[RunStore, StatementLog]]:
    engine = create_engine(store_url)
    log = StatementLog(engine)
    store = RunStore(engine, root_hash=ROOT_HASH, clock=clock)
    try:
        yield store, log
    finally:
        store.close()
        engine.dispose()


def _after_of(dialect: str, sql: str, params: Any) -> int:
    """The `after` bound of a leaf page (its first parameter in both paramstyles)."""
    if isinstance(params, dict):
        return int(params["after"])
    return int(params[0])


def test_a_checkpoint_reads_and_writes_only_what_came_since_the_last(
    logged_store: tuple[RunStore, StatementLog],
) -> None:
    store, log = logged_store
    grow(store, 700, "w")  # 700 leaves: two full tiles of 256 and a partial one
    log.clear()
    first = store.checkpoint(KEY)
    assert first.size == 700
    tile_writes = log.matching("tree_tiles", "INSERT")
    assert len(tile_writes) == 4  # leaf tiles 0, 1 (full) and 2 (partial); level 1's
    grow(store, 5, "w2")
    log.clear()
    second = store.checkpoint(KEY)
    assert second.size == 705
    pages = log.matching("feed_position >", "ORDER BY")
    assert pages, "the leaves are read in pages"
    # only the right edge's leaves (from 512, rechecked) and the new ones are read
    assert all(_after_of(store.dialect_name, *page) >= 512 for page in pages)
    # the partial tile of leaves and the level-1 tile: rewritten once each
    assert len(log.matching("tree_tiles", "INSERT")) == 2
    proof_reads_before = len(log.matching("FROM", "tree_tiles"))
    log.clear()
    store.inclusion_proof(store.run_ids()[0], size=705)
    tile_reads = log.matching("FROM", "tree_tiles")
    assert 0 < len(tile_reads) <= (705).bit_length()  # one row per tile it needs, O(log n)
    assert proof_reads_before > 0


# -- concurrency (PostgreSQL: two connections) --------------------------------------------


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_concurrent_checkpoints_serialize(store_url: str, clock: FakeClock, db: Engine) -> None:
    from cadence_store.storage.tree_statements import CHECKPOINT_LOCK_KEY

    first = RunStore(store_url, root_hash=ROOT_HASH, clock=clock)
    second = RunStore(store_url, root_hash=ROOT_HASH, clock=clock)
    try:
        grow(first, 300, "cc")
        results: list[SignedCheckpoint | BaseException] = []

        def sign(on: RunStore) -> None:
            try:
                results.append(on.checkpoint(KEY))
            except BaseException as error:  # reported below
                results.append(error)

        with db.connect() as holder:
            holder.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHECKPOINT_LOCK_KEY})
            threads = [threading.Thread(target=sign, args=(on,)) for on in (first, second)]
            for thread in threads:
                thread.start()
            _wait_for_lock_waiters(db, 2)  # both are at the lock, neither has read the tree
            holder.rollback()  # releases it: they run one after the other
            for thread in threads:
                thread.join(timeout=120)
        assert all(isinstance(result, SignedCheckpoint) for result in results), results
        assert {result.root_hash for result in results} == {  # type: ignore[union-attr]
            merkle.root_of(feed_leaves(db)).hex()
        }
        with db.connect() as connection:
            ids = (
                connection.execute(text("SELECT checkpoint_id FROM checkpoints ORDER BY 1"))
                .scalars()
                .all()
            )
            tiles = connection.execute(text("SELECT count(*) FROM tree_tiles")).scalar_one()
        assert ids == [1, 2]
        assert tiles == 3  # leaf tiles 0 and 1, level 1's: written by the first only
    finally:
        first.close()
        second.close()


def _wait_for_lock_waiters(db: Engine, count: int) -> None:
    """Until `count` sessions wait for an advisory lock (a condition, not a duration)."""
    with db.connect() as connection:
        for _ in range(10_000):
            waiting = connection.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            ).scalar_one()
            if waiting >= count:
                return
            connection.rollback()
            connection.execute(text("SELECT pg_sleep(0.01)"))
    raise AssertionError("the checkpoints never reached the lock")
