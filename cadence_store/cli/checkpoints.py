"""`keygen`, `checkpoint`, `prove`, and `verify --checkpoint`'s half: the transparency
tree's signed checkpoints from the command line.

A signer key is a secret: `keygen` writes it to a new file of mode 0600 and prints only
the verifier key; nothing here prints, logs or puts the signer key in a message."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..errors import CheckpointError, InvalidInputError
from ..journal.merkle import root_from_inclusion_proof
from ..journal.note_keys import CHECKPOINT_KEY_INVALID, generate_signer_key
from ..journal.notes import parse_checkpoint, parse_note
from ..journal.tree_views import CheckpointReport
from ..store.run_store import RunStore
from . import render
from .group import F, main, opened, url_option

KEY_FILE_EXISTS = "key-file-exists"
CHECKPOINT_FILE_UNREADABLE = "checkpoint-file-unreadable"
SIGNING_KEY_ENV = "CADENCE_STORE_SIGNING_KEY_FILE"


def signer_key_option(help_text: str) -> Callable[[F], F]:
    """`--key FILE` (as `key_file`), required, read from $CADENCE_STORE_SIGNING_KEY_FILE
    when not given: the signer key file of a command that signs a checkpoint."""
    return click.option(
        "--key",
        "key_file",
        envvar=SIGNING_KEY_ENV,
        required=True,
        metavar="FILE",
        help=help_text,
    )


def read_signer_key_file(path: str) -> str:
    """The signer key text of a key file (`checkpoint-key-invalid` if it cannot be read;
    its content is never shown)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, f"cannot read {path}: {reason}") from None


def read_verifier_key(value: str) -> str:
    """`--vkey`: the verifier key's text, or a file holding it."""
    if "+" in value and not os.path.exists(value):
        return value.strip()
    try:
        return Path(value).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise InvalidInputError(
            CHECKPOINT_KEY_INVALID, "--vkey is a verifier key (<name>+<id>+<key>) or its file"
        ) from None


def read_note_file(path: str) -> str:
    """A signed checkpoint note from a file ('-': standard input), exactly as written."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise InvalidInputError(
            CHECKPOINT_FILE_UNREADABLE, f"cannot read {path}: {reason}"
        ) from None


@main.command(name="keygen")
@click.argument("name")
@click.option("--out", "out", required=True, metavar="FILE", help="New file for the signer key.")
def keygen(name: str, out: str) -> None:
    """Make an Ed25519 signer key named NAME: the signer key goes to a new file of mode
    0600 (an existing file is never overwritten); the verifier key is printed.

    \b
    Example: cadence-store keygen example.com/runs --out runs.key
    """
    key = generate_signer_key(name)
    try:
        descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInputError(KEY_FILE_EXISTS, f"{out} exists; it was left as it is") from None
    except OSError as error:
        raise InvalidInputError(
            CHECKPOINT_KEY_INVALID, f"cannot create {out}: {error.strerror}"
        ) from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key.encode() + "\n")
    click.echo(key.verifier().encode())


@main.command(name="checkpoint")
@signer_key_option(f"The signer key file (default: ${SIGNING_KEY_ENV}).")
@click.option(
    "--origin", default=None, metavar="TEXT", help="The log's origin (default: the key's name)."
)
@url_option
def checkpoint(key_file: str, origin: str | None, url: str | None) -> None:
    """Sign the store's tree head: number the feed, extend the tree by the events since
    the last checkpoint, record the signed note in the store and print it.

    \b
    Example: cadence-store checkpoint --key runs.key --url sqlite:///runs.sqlite3 > head.txt
    """
    key = read_signer_key_file(key_file)
    with opened(url) as store:
        signed = store.checkpoint(key, origin=origin)
    click.echo(signed.note, nl=False)


def verify_checkpoint_file(store: RunStore, checkpoint_file: str, vkey: str) -> CheckpointReport:
    """`verify --checkpoint FILE --vkey KEY`'s work (`verify.py` prints the report)."""
    return store.verify_checkpoint(read_note_file(checkpoint_file), read_verifier_key(vkey))


def print_report(report: CheckpointReport, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.to_json()))
        return
    click.echo(
        f"checkpoint of {report.size} leaves (root {report.root_hash}) verified: the store's"
        f" tree has {report.tree_size} leaves; {report.runs_verified} run(s),"
        f" {report.events_verified} event(s) verified"
    )


@main.command(name="prove")
@click.argument("run_id")
@click.option(
    "--sequence", type=int, default=None, metavar="N", help="The event (default: the run's newest)."
)
@click.option(
    "--checkpoint",
    "checkpoint_file",
    required=True,
    metavar="FILE",
    help="A signed checkpoint note.",
)
@url_option
def prove(run_id: str, sequence: int | None, checkpoint_file: str, url: str | None) -> None:
    """Print the inclusion proof (JSON) of a run's event in the tree of a checkpoint the
    store recorded; exits 1 when the store's tree at that size is not the checkpoint's.

    \b
    Example: cadence-store prove 0e4c... --checkpoint head.txt --url sqlite:///runs.sqlite3
    """
    note = read_note_file(checkpoint_file)
    head = parse_checkpoint(parse_note(note).text)
    with opened(url) as store:
        proof = store.inclusion_proof(run_id, sequence, size=head.size)
    found = root_from_inclusion_proof(
        proof.leaf_hash, proof.leaf_index, proof.tree_size, list(proof.hashes)
    )
    if found != head.root_hash:
        raise CheckpointError(
            "checkpoint-mismatch",
            f"the store's tree of {head.size} leaves has another root than the checkpoint's",
            run_id=run_id,
            sequence=proof.sequence,
            expected=head.root_hash.hex(),
            actual=found.hex(),
        )
    document = proof.to_json() | {"origin": head.origin, "checkpoint": note}
    click.echo(render.printable(json.dumps(document, ensure_ascii=False)))


__all__ = ["checkpoint", "keygen", "print_report", "prove", "verify_checkpoint_file"]
