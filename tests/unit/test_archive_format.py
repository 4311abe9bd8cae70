"""The archive file's lines (`journal.archive_format`, re-exported by
`transfer.archive_file`): what the writer functions write, that the readers take back
exactly that, and what each refuses (`archive-invalid`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cadence_store.errors import ArchiveInvalidError, JournalIntegrityError
from cadence_store.journal import archive_format
from cadence_store.journal.archive_format import (
    ARCHIVE_FORMAT,
    ArchivedLeaf,
    ArchiveHeader,
    ArchiveTrailer,
    header_line,
    run_line,
    trailer_line,
)
from cadence_store.journal.merkle import MemoryTree, feed_leaf_hash, inclusion_proof
from cadence_store.journal.notes import Checkpoint, generate_signer_key, sign_checkpoint
from cadence_store.journal.tree_views import InclusionProof
from cadence_store.transfer import archive_file, dump_record

SIGNER = generate_signer_key("example.com/runs")


def _note(size: int, root: bytes = b"\x07" * 32) -> str:
    return sign_checkpoint(Checkpoint("example.com/runs", size, root), SIGNER)


def _record(sequences: list[int]) -> Any:
    """An export record's shape (run_line does not check a record's rows: the store's)."""
    return {
        "run": {"run_id": "r-1", "projection_json": '{"state":"completed"}'},
        "events": [
            {"run_id": "r-1", "sequence": n, "payload_json": '{"x":"\u2014"}'} for n in sequences
        ],
        "operations": [],
        "deliveryBindings": [],
    }


def test_callers_find_the_lines_in_transfer_archive_file() -> None:
    for name in ("ARCHIVE_FORMAT", "ArchivedLeaf", "header_line", "run_line", "trailer_line"):
        assert getattr(archive_file, name) is getattr(archive_format, name)


def test_the_header_line_carries_the_note_verbatim() -> None:
    note = _note(5)
    line = header_line(note, 5, 1_700_000_000_000, 1_700_000_500_000)
    assert line.endswith("}\n") and line.count("\n") == 1 and line.isascii()
    assert json.loads(line) == {
        "archive": ARCHIVE_FORMAT,
        "checkpoint": note,
        "treeSize": 5,
        "finishedBeforeMs": 1_700_000_000_000,
        "createdAtMs": 1_700_000_500_000,
    }
    assert list(json.loads(line)) == [
        "archive",
        "checkpoint",
        "treeSize",
        "finishedBeforeMs",
        "createdAtMs",
    ]
    header = archive_format.parse_header(json.loads(line))
    assert header == ArchiveHeader(note, 5, 1_700_000_000_000, 1_700_000_500_000)
    assert header.checkpoint.size == 5 and header.checkpoint.origin == "example.com/runs"


@pytest.mark.parametrize(
    "arguments",
    [
        (_note(5), 6, 0, 0),  # another size than the note's
        ("not a note\n", 5, 0, 0),
        (_note(5), 5, -1, 0),
        (_note(5), 5, 0, True),
    ],
    ids=["size", "note", "negative-bound", "bool-time"],
)
def test_the_header_line_refuses_what_is_not_a_checkpoint_of_its_size(
    arguments: tuple[Any, ...],
) -> None:
    with pytest.raises(ArchiveInvalidError) as caught:
        header_line(*arguments)
    assert caught.value.code == "archive-invalid"
    assert isinstance(caught.value, JournalIntegrityError)  # evidence that does not hold


@pytest.mark.parametrize(
    "value",
    [
        {"run": {}},
        {"archive": "cadence-store-archive/2"},
        {"archive": ARCHIVE_FORMAT, "checkpoint": _note(1), "treeSize": 1},
        [],
    ],
    ids=["export-record", "other-version", "missing-keys", "not-an-object"],
)
def test_a_first_line_that_is_not_a_header_is_not_an_archive(value: object) -> None:
    with pytest.raises(ArchiveInvalidError, match="line 1"):
        archive_format.parse_header(value)


def test_the_run_line_is_the_export_record_with_its_leaves_last() -> None:
    record = _record([1, 2])
    leaves = [ArchivedLeaf(1, 3, (b"\x01" * 32,)), ArchivedLeaf(2, 7, (b"\x02" * 32, b"\x03" * 32))]
    line = run_line(record, leaves)
    assert line.endswith("\n") and line.isascii()
    leaves_json = json.dumps([leaf.to_json() for leaf in leaves], separators=(",", ":"))
    assert line == dump_record(record)[:-1] + ',"leaves":' + leaves_json + "}\n"
    value = json.loads(line)
    assert list(value) == ["run", "events", "operations", "deliveryBindings", "leaves"]
    assert value["leaves"][1] == {"sequence": 2, "leafIndex": 7, "hashes": ["02" * 32, "03" * 32]}
    assert archive_format.parse_leaves(value["leaves"], "r-1", [1, 2]) == tuple(leaves)


@pytest.mark.parametrize(
    "leaves",
    [
        [ArchivedLeaf(1, 0, ())],
        [ArchivedLeaf(2, 1, ()), ArchivedLeaf(1, 0, ())],
        [ArchivedLeaf(1, 0, ()), ArchivedLeaf(2, 1, ()), ArchivedLeaf(3, 2, ())],
    ],
    ids=["too-few", "out-of-order", "too-many"],
)
def test_the_run_line_refuses_leaves_that_do_not_name_its_events(
    leaves: list[ArchivedLeaf],
) -> None:
    with pytest.raises(ArchiveInvalidError) as caught:
        run_line(_record([1, 2]), leaves)
    assert caught.value.run_id == "r-1"


def test_a_leaf_comes_from_a_stores_inclusion_proof() -> None:
    leaves = [feed_leaf_hash("r-1", n, f"{n:064x}") for n in (1, 2, 3)]
    tree = MemoryTree(leaves)
    proof = InclusionProof(
        origin="example.com/runs",
        tree_size=3,
        leaf_index=1,
        run_id="r-1",
        sequence=2,
        event_hash=f"{2:064x}",
        hashes=tuple(inclusion_proof(tree, 1, 3)),
        checkpoint=_note(3, tree.root()),
    )
    leaf = ArchivedLeaf.from_proof(proof)
    assert leaf == ArchivedLeaf(2, 1, proof.hashes)
    assert leaf.to_json()["hashes"] == [hash_.hex() for hash_ in proof.hashes]


@pytest.mark.parametrize(
    "value",
    [
        {"sequence": 1, "leafIndex": 0},
        {"sequence": 2, "leafIndex": 0, "hashes": []},
        {"sequence": True, "leafIndex": 0, "hashes": []},
        {"sequence": 1, "leafIndex": -1, "hashes": []},
        {"sequence": 1, "leafIndex": 0, "hashes": ["AB" * 32]},
        {"sequence": 1, "leafIndex": 0, "hashes": ["ab" * 31]},
        {"sequence": 1, "leafIndex": 0, "hashes": "ab"},
    ],
    ids=["keys", "sequence", "bool", "index", "upper-hex", "short-hash", "not-a-list"],
)
def test_a_malformed_leaf_is_refused(value: dict[str, Any]) -> None:
    with pytest.raises(ArchiveInvalidError) as caught:
        archive_format.parse_leaves([value], "r-1", [1], line=4)
    assert caught.value.run_id == "r-1" and "line 4" in str(caught.value)


def test_the_trailer_counts_runs_and_events() -> None:
    line = trailer_line(2, 9)
    assert line == '{"end":{"runs":2,"events":9}}\n'
    value = json.loads(line)
    assert archive_format.is_trailer(value) and not archive_format.is_trailer({"run": {}})
    assert archive_format.parse_trailer(value) == ArchiveTrailer(2, 9)
    for bad in ({"end": {"runs": 2}}, {"end": {"runs": -1, "events": 0}}, {"end": 1, "x": 0}):
        with pytest.raises(ArchiveInvalidError):
            archive_format.parse_trailer(bad)
    with pytest.raises(ArchiveInvalidError):
        trailer_line(-1, 0)
