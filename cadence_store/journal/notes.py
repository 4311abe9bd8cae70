"""Signed notes and transparency-log checkpoints (C2SP `signed-note`, `tlog-checkpoint`).

A signed note is a text ending in a newline, a blank line, then one or more signature
lines `— <key name> <base64(4-byte key id || signature)>`. A checkpoint's text is its
origin, its tree size in decimal and its root in base64, a line each, then optional
extension lines. Verification checks the signatures by the given key, ignores those by
unknown keys (as the spec requires), and refuses the note when none is by that key or one
of its fails. A note that does not follow the format is `checkpoint-malformed`.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Final

from ..errors import CheckpointError, InvalidInputError
from .merkle import HASH_SIZE, MAX_TREE_SIZE
from .note_keys import (
    SignerKey,
    VerifierKey,
    generate_signer_key,
    is_key_name,
    key_id,
    parse_signer_key,
    parse_verifier_key,
    strict_b64decode,
)

CHECKPOINT_MALFORMED: Final = "checkpoint-malformed"
CHECKPOINT_SIGNATURE_INVALID: Final = "checkpoint-signature-invalid"
INVALID_CHECKPOINT: Final = "invalid-checkpoint"
MAX_SIGNATURES: Final = 100  # the spec asks for at least 16; Go's reader allows 100
_SIGNATURE_PREFIX: Final = "— "  # em dash (U+2014), space
_TREE_SIZE: Final = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_CONTROL: Final = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control but newline


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: the log's origin, its size and root, and any extension lines.
    Constructing one with a value the format cannot carry is `invalid-checkpoint`."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _is_line(self.origin):
            raise InvalidInputError(INVALID_CHECKPOINT, "an origin is one non-empty line")
        size = self.size
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_TREE_SIZE:
            raise InvalidInputError(INVALID_CHECKPOINT, "a tree size is an int >= 0")
        if not isinstance(self.root_hash, bytes) or len(self.root_hash) != HASH_SIZE:
            raise InvalidInputError(INVALID_CHECKPOINT, f"a root hash is {HASH_SIZE} bytes")
        if not isinstance(self.extensions, tuple) or not all(map(_is_line, self.extensions)):
            raise InvalidInputError(INVALID_CHECKPOINT, "extensions are a tuple of lines")


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key's name and id, and the signature bytes."""

    name: str
    key_id: int
    signature: bytes


@dataclass(frozen=True)
class Note:
    """A signed note's text (with its final newline) and its signatures."""

    text: str
    signatures: tuple[NoteSignature, ...]


def format_checkpoint(checkpoint: Checkpoint) -> str:
    """The checkpoint's note text, each line ending in a newline."""
    root = base64.b64encode(checkpoint.root_hash).decode("ascii")
    lines = [checkpoint.origin, str(checkpoint.size), root, *checkpoint.extensions]
    return "".join(f"{line}\n" for line in lines)


def parse_checkpoint(text: str) -> Checkpoint:
    """Read a checkpoint's note text strictly: `checkpoint-malformed` unless it is."""
    if not isinstance(text, str) or not text.endswith("\n") or _CONTROL.search(text):
        raise _malformed("a checkpoint is lines of text, each ending in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not all(lines):
        raise _malformed("a checkpoint has an origin, a size and a root, no empty line")
    origin, size, root, *extensions = lines
    if not _TREE_SIZE.fullmatch(size) or int(size) > MAX_TREE_SIZE:
        raise _malformed("a tree size is decimal without leading zeros")
    root_hash = strict_b64decode(root)
    if root_hash is None or len(root_hash) != HASH_SIZE:
        raise _malformed(f"a root is the base64 of {HASH_SIZE} bytes")
    return Checkpoint(origin, int(size), root_hash, tuple(extensions))


def parse_note(message: str | bytes) -> Note:
    """Split a signed note into its text and signatures, strictly (not verified)."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            raise _malformed("a note is UTF-8") from None
    if not isinstance(message, str) or not _is_note_text(message):
        raise _malformed("a note is UTF-8 text with no control character but newline")
    split = message.rfind("\n\n")
    text, block = message[: split + 1], message[split + 2 :]
    if split < 0 or not block.endswith("\n"):
        raise _malformed("a note is a text, a blank line and signature lines")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise _malformed(f"a note has at most {MAX_SIGNATURES} signatures")
    return Note(text, tuple(_signature(line) for line in lines))


def sign_note(text: str, signer: SignerKey | str) -> str:
    """The note of `text` (ending in a newline) signed by `signer` (a key or its text)."""
    if not isinstance(text, str) or not text.endswith("\n") or not _is_note_text(text):
        raise InvalidInputError(INVALID_CHECKPOINT, "a note's text ends in a newline")
    key = signer if isinstance(signer, SignerKey) else parse_signer_key(signer)
    signature = key.key_id.to_bytes(4, "big") + key.sign(text.encode("utf-8"))
    line = f"{_SIGNATURE_PREFIX}{key.name} {base64.b64encode(signature).decode('ascii')}\n"
    return f"{text}\n{line}"


def verify_note(message: str | bytes, verifier: VerifierKey | str) -> Note:
    """The note, once its signatures by `verifier` (a key or its text) verify; the
    returned note keeps only those. `checkpoint-signature-invalid` when there is none,
    or one fails; signatures by other keys are ignored."""
    key = verifier if isinstance(verifier, VerifierKey) else parse_verifier_key(verifier)
    note = parse_note(message)
    mine = tuple(
        signature
        for signature in note.signatures
        if signature.name == key.name and signature.key_id == key.key_id
    )
    if not mine:
        raise CheckpointError(
            CHECKPOINT_SIGNATURE_INVALID,
            f"the note has no signature by {key.name}+{key.key_id:08x}",
        )
    signed = note.text.encode("utf-8")
    for signature in mine:
        if not key.verifies(signed, signature.signature):
            raise CheckpointError(
                CHECKPOINT_SIGNATURE_INVALID,
                f"a signature by {key.name}+{key.key_id:08x} does not verify",
            )
    return Note(note.text, mine)


def sign_checkpoint(checkpoint: Checkpoint, signer: SignerKey | str) -> str:
    """The checkpoint as a note signed by `signer`."""
    return sign_note(format_checkpoint(checkpoint), signer)


def verify_checkpoint(message: str | bytes, verifier: VerifierKey | str) -> Checkpoint:
    """The checkpoint of a note whose signature by `verifier` verifies."""
    return parse_checkpoint(verify_note(message, verifier).text)


def _signature(line: str) -> NoteSignature:
    if not line.startswith(_SIGNATURE_PREFIX):
        raise _malformed("a signature line begins with an em dash and a space")
    name, _, encoded = line.removeprefix(_SIGNATURE_PREFIX).partition(" ")
    raw = strict_b64decode(encoded)
    if not is_key_name(name) or raw is None or len(raw) < 5:
        raise _malformed("a signature line is '— <key name> <base64(key id || signature)>'")
    return NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def _is_note_text(text: str) -> bool:
    if _CONTROL.search(text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _is_line(value: object) -> bool:
    return isinstance(value, str) and value != "" and "\n" not in value and _is_note_text(value)


def _malformed(detail: str) -> CheckpointError:
    return CheckpointError(CHECKPOINT_MALFORMED, detail)


__all__ = [
    "CHECKPOINT_MALFORMED",
    "CHECKPOINT_SIGNATURE_INVALID",
    "INVALID_CHECKPOINT",
    "MAX_SIGNATURES",
    "Checkpoint",
    "Note",
    "NoteSignature",
    "SignerKey",
    "VerifierKey",
    "format_checkpoint",
    "generate_signer_key",
    "key_id",
    "parse_checkpoint",
    "parse_note",
    "parse_signer_key",
    "parse_verifier_key",
    "sign_checkpoint",
    "sign_note",
    "verify_checkpoint",
    "verify_note",
]
