"""cadence_store.journal.notes: C2SP signed notes and tlog checkpoints, Ed25519 keys.

Known answers from published sources:
- golang.org/x/mod sumdb/note/note_test.go (repository golang/mod): the PeterNeumann
  signer and verifier keys and the exact signed note of TestSign; the EnochRoot key and
  signature line, the tampered and malformed notes of TestOpen; the key manglings of
  TestNewVerifier and TestNewSigner.
- sigsum-go pkg/checkpoint/checkpoint_test.go, TestGoSumDBCheckpoint (repository
  sigsum/sigsum-go): a checkpoint signed by sum.golang.org's production key ("Retrieved
  from https://sum.golang.org/latest, 2024-09-23"); the key is Go's own, from
  golang/go src/cmd/go/internal/modfetch/key.go. A note signed by Go's implementation
  that ours verifies, as ours signs the byte-exact note Go's test expects.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadence_store.errors import CheckpointError, InvalidInputError
from cadence_store.journal.notes import (
    Checkpoint,
    NoteSignature,
    format_checkpoint,
    generate_signer_key,
    parse_checkpoint,
    parse_note,
    parse_signer_key,
    parse_verifier_key,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
    verify_note,
)

PETER_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VERIFIER = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot "
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
SUMDB_VERIFIER = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_CHECKPOINT = (
    "go.sum database tree\n"
    "30055305\n"
    "mXfgRcJ0bG0j3CPdKwgGWtUzBUbX67saZGRmFuJGGsM=\n"
    "\n"
    "— sum.golang.org "
    "Az3grpgEild5qw7+5dtV13Kf1C2Xurm8q4fhdxvcsDHnqNTaxL2AFjBY+2TyGKevucFcAAlWFJJYle3EJlDCrQ+y3A8=\n"
)
ROOT = bytes.fromhex("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")


def _code(call: object, *args: object) -> str:
    try:
        call(*args)  # type: ignore[operator]
    except (CheckpointError, InvalidInputError) as error:
        return error.code
    return "accepted"


def test_the_signer_makes_gos_exact_note() -> None:
    """TestSign: Ed25519 is deterministic, so the line is byte for byte Go's."""
    assert sign_note(TEXT, PETER_SIGNER) == TEXT + "\n" + PETER_SIG
    assert sign_note(TEXT, parse_signer_key(PETER_SIGNER)) == TEXT + "\n" + PETER_SIG


def test_the_keys_are_gos() -> None:
    signer = parse_signer_key(PETER_SIGNER)
    assert signer.encode() == PETER_SIGNER
    assert signer.verifier() == parse_verifier_key(PETER_VERIFIER)
    assert str(parse_verifier_key(PETER_VERIFIER)) == PETER_VERIFIER
    assert (signer.name, signer.key_id) == ("PeterNeumann", 0xC74F20A3)


def test_gos_note_verifies() -> None:
    note = verify_note(TEXT + "\n" + PETER_SIG, PETER_VERIFIER)
    assert note.text == TEXT
    assert [(s.name, s.key_id) for s in note.signatures] == [("PeterNeumann", 0xC74F20A3)]


def test_a_note_signed_by_gos_sumdb_verifies() -> None:
    checkpoint = verify_checkpoint(SUMDB_CHECKPOINT, SUMDB_VERIFIER)
    assert checkpoint == Checkpoint(
        "go.sum database tree",
        30055305,
        base64.b64decode("mXfgRcJ0bG0j3CPdKwgGWtUzBUbX67saZGRmFuJGGsM="),
    )
    assert format_checkpoint(checkpoint) == SUMDB_CHECKPOINT.split("\n\n", maxsplit=1)[0] + "\n"
    tampered = SUMDB_CHECKPOINT.replace("30055305", "30055306")
    assert _code(verify_checkpoint, tampered, SUMDB_VERIFIER) == "checkpoint-signature-invalid"


def test_of_several_signatures_only_the_keys_count() -> None:
    """TestOpen: each known key's signature verifies, unknown ones are ignored."""
    message = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    peter = verify_note(message, PETER_VERIFIER)
    enoch = verify_note(message, ENOCH_VERIFIER)
    assert [s.name for s in peter.signatures] == ["PeterNeumann"]
    assert [s.name for s in enoch.signatures] == ["EnochRoot"]
    assert [s.name for s in parse_note(message).signatures] == ["PeterNeumann", "EnochRoot"]
    # a signature of ours beside Go's, in either order
    ours = generate_signer_key("example.com/log")
    our_line = sign_note(TEXT, ours).removeprefix(TEXT + "\n")
    for both in (message + our_line, TEXT + "\n" + our_line + PETER_SIG):
        assert verify_note(both, ours.verifier()).signatures[0].name == "example.com/log"
        assert verify_note(both, PETER_VERIFIER).signatures[0].name == "PeterNeumann"
    # repeated signature lines (TestOpen's duplicated verified and unverified ones)
    enoch_abcd = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]
    repeated = TEXT + "\n" + PETER_SIG * 2 + ENOCH_SIG * 2 + enoch_abcd
    assert len(verify_note(repeated, PETER_VERIFIER).signatures) == 2


@pytest.mark.parametrize(
    ("message", "code"),
    [
        # no signature by the key: unknown keys only, or none at all that match
        (TEXT + "\n" + ENOCH_SIG, "checkpoint-signature-invalid"),
        (
            TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "CarmenSandiego"),
            "checkpoint-signature-invalid",
        ),
        (TEXT + "\n" + PETER_SIG.replace("x08g", "xxxx"), "checkpoint-signature-invalid"),
        # TestOpen's invalid signature
        (TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:], "checkpoint-signature-invalid"),
        # a valid signature and a failing one by the same key: the whole note is refused
        (
            TEXT + "\n" + PETER_SIG + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:],
            "checkpoint-signature-invalid",
        ),
        # the signed text changed
        (TEXT.replace("problem", "answer", 1) + "\n" + PETER_SIG, "checkpoint-signature-invalid"),
        # TestOpen's too many signatures and bad messages
        (TEXT + "\n" + PETER_SIG * 101, "checkpoint-malformed"),
        (TEXT, "checkpoint-malformed"),
        (TEXT + "\n", "checkpoint-malformed"),
        (TEXT + "\n" + PETER_SIG[:-1], "checkpoint-malformed"),
        ("\x01" + TEXT + "\n" + PETER_SIG, "checkpoint-malformed"),
        (b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), "checkpoint-malformed"),
        (
            TEXT + "\n" + "— Bad Name" + PETER_SIG.removeprefix("— PeterNeumann"),
            "checkpoint-malformed",
        ),
        (TEXT + "\n" + PETER_SIG + "Unexpected line.\n", "checkpoint-malformed"),
        # a signature too short to hold a key id and a signature, and one not base64
        (TEXT + "\n— PeterNeumann x08g\n", "checkpoint-malformed"),
        (TEXT + "\n— PeterNeumann x08go/ZJ*\n", "checkpoint-malformed"),
        (TEXT + "\n— PeterNeumann \n", "checkpoint-malformed"),
        ("\ud800" + TEXT + "\n" + PETER_SIG, "checkpoint-malformed"),
    ],
)
def test_a_tampered_or_malformed_note_is_refused(message: str | bytes, code: str) -> None:
    assert _code(verify_note, message, PETER_VERIFIER) == code


def test_the_note_as_bytes_is_the_same_note() -> None:
    message = TEXT + "\n" + PETER_SIG
    assert verify_note(message.encode("utf-8"), PETER_VERIFIER) == verify_note(
        message, PETER_VERIFIER
    )


def _manglings(key: str) -> list[str]:
    """TestNewVerifier / TestNewSigner: every proper substring, every byte plus one."""
    raw = key.encode("ascii")
    cut = [
        raw[start:end].decode("ascii")
        for start in range(len(raw) + 1)
        for end in range(start + 1, len(raw) + 1)
        if (start, end) != (0, len(raw))
    ]
    bumped = [
        (raw[:i] + bytes([raw[i] + 1]) + raw[i + 1 :]).decode("ascii") for i in range(len(raw))
    ]
    return cut + bumped


def test_every_mangled_verifier_key_is_refused() -> None:
    accepted = [
        k
        for k in _manglings(PETER_VERIFIER)
        if _code(parse_verifier_key, k) != "checkpoint-key-invalid"
    ]
    assert accepted == []
    # TestNewVerifier: a key of the wrong length and of an unknown algorithm, ids adjusted
    for key in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ):
        assert _code(parse_verifier_key, key) == "checkpoint-key-invalid"


def test_every_mangled_signer_key_is_refused_without_showing_it() -> None:
    for key in _manglings(PETER_SIGNER):
        with pytest.raises(InvalidInputError) as raised:
            parse_signer_key(key)
        assert raised.value.code == "checkpoint-key-invalid"
        assert "AYEKFALV" not in str(raised.value)


@pytest.mark.parametrize(
    "key",
    [
        "",
        None,
        PETER_VERIFIER.upper(),
        PETER_VERIFIER.replace("+c74f20a3+", "+C74F20A3+"),  # ids are written in lowercase
        PETER_VERIFIER.replace("ARpc", " ARpc"),
        PETER_VERIFIER + "\n",
        PETER_VERIFIER.replace("W", "X"),  # non-canonical base64 padding bits
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        PETER_SIGNER,  # a signer key is not a verifier key
        "\ud800+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # not UTF-8
    ],
)
def test_a_malformed_verifier_key_is_refused(key: object) -> None:
    assert _code(parse_verifier_key, key) == "checkpoint-key-invalid"


def test_a_signer_key_stays_out_of_its_repr() -> None:
    signer = parse_signer_key(PETER_SIGNER)
    assert repr(signer) == "SignerKey(name='PeterNeumann', key_id=c74f20a3)"
    assert PETER_SIGNER not in repr(signer) and "AYEKFALV" not in str(signer)
    assert _code(parse_signer_key, PETER_VERIFIER) == "checkpoint-key-invalid"


def test_a_generated_key_round_trips() -> None:
    signer = generate_signer_key("cadence.example/log")
    again = parse_signer_key(signer.encode())
    assert again.verifier() == signer.verifier() == parse_verifier_key(str(signer.verifier()))
    checkpoint = Checkpoint("cadence.example/log", 8, ROOT, ("extension line",))
    note = sign_checkpoint(checkpoint, again)
    assert note.startswith("cadence.example/log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n")
    assert verify_checkpoint(note, signer.verifier()) == checkpoint
    for name in ("", "a b", "a+b", "a\x00b", "a\u00a0b", "a\udc80", 7):
        assert _code(generate_signer_key, name) == "checkpoint-key-invalid"


def _resigned(note: str, change: tuple[str, str]) -> str:
    return note.replace(*change, 1)


def _flipped_signature(note: str) -> str:
    text, line = note.rsplit("\n— ", 1)
    name, encoded = line.rstrip("\n").split(" ")
    raw = bytearray(base64.b64decode(encoded))
    raw[10] ^= 1
    return f"{text}\n— {name} {base64.b64encode(bytes(raw)).decode()}\n"


def test_a_changed_checkpoint_or_another_key_fails() -> None:
    signer = generate_signer_key("cadence.example/log")
    note = sign_checkpoint(Checkpoint("cadence.example/log", 8, ROOT), signer)
    verifier = signer.verifier()
    other_root = base64.b64encode(bytes(32)).decode()
    for tampered in (
        _resigned(note, ("\n8\n", "\n7\n")),
        _resigned(note, ("cadence.example/log\n", "cadence.example/other\n")),
        _resigned(note, ("XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=", other_root)),
        _flipped_signature(note),
    ):
        assert _code(verify_checkpoint, tampered, verifier) == "checkpoint-signature-invalid"
    same_name = generate_signer_key("cadence.example/log").verifier()
    assert _code(verify_checkpoint, note, same_name) == "checkpoint-signature-invalid"
    assert _code(verify_checkpoint, note, PETER_VERIFIER) == "checkpoint-signature-invalid"
    # a checkpoint's signature checked against Go's key under the same name and id is
    # still checked, and fails: only a known key's own signature counts
    forged = note.replace("— cadence.example/log", "— PeterNeumann")
    assert _code(verify_checkpoint, forged, PETER_VERIFIER) == "checkpoint-signature-invalid"


@pytest.mark.parametrize(
    "text",
    [
        "origin\n8\n",  # no root
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",  # no final newline
        "origin\n\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n08\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n+8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n 8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n\u0668\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",  # an Arabic digit
        "origin\n9223372036854775808\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyh=\n",  # non-canonical
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQw==\n",  # 31 bytes
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg\n",  # no padding
        "origin\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n",  # an empty extension
        "origin\r\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
    ],
)
def test_a_malformed_checkpoint_is_refused(text: str) -> None:
    assert _code(parse_checkpoint, text) == "checkpoint-malformed"


def test_a_checkpoint_parses_strictly_and_keeps_its_extensions() -> None:
    text = "example.com/behind-the-sofa\n0\n" + base64.b64encode(ROOT).decode() + "\nx y\n"
    checkpoint = parse_checkpoint(text)
    assert checkpoint == Checkpoint("example.com/behind-the-sofa", 0, ROOT, ("x y",))
    assert format_checkpoint(checkpoint) == text


@pytest.mark.parametrize(
    "fields",
    [
        ("", 1, ROOT),
        ("a\nb", 1, ROOT),
        ("a\tb", 1, ROOT),
        ("origin", -1, ROOT),
        ("origin", True, ROOT),
        ("origin", 2**63, ROOT),
        ("origin", 1, ROOT[:31]),
        ("origin", 1, ROOT.hex()),
        ("origin", 1, ROOT, ("",)),
        ("origin", 1, ROOT, ["a"]),
    ],
)
def test_a_checkpoint_the_format_cannot_carry_is_refused(fields: tuple[object, ...]) -> None:
    assert _code(Checkpoint, *fields) == "invalid-checkpoint"


@pytest.mark.parametrize("text", ["no newline", "", "bad\x00\n", "\udc80\n", b"bytes\n"])
def test_a_text_a_note_cannot_carry_is_not_signed(text: object) -> None:
    assert _code(sign_note, text, PETER_SIGNER) == "invalid-checkpoint"


def test_a_text_with_empty_lines_signs_and_verifies() -> None:
    """signed-note: the text may hold empty lines; the last one separates the signatures."""
    text = "first\n\nafter an empty line\n"
    note = verify_note(sign_note(text, PETER_SIGNER), PETER_VERIFIER)
    assert note.text == text
    assert note.signatures[0] == NoteSignature(
        "PeterNeumann", 0xC74F20A3, note.signatures[0].signature
    )


origins = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(
    lambda origin: "\n" not in origin
)


@given(
    origin=origins,
    size=st.integers(min_value=0, max_value=2**63 - 1),
    root=st.binary(min_size=32, max_size=32),
    extensions=st.lists(origins, max_size=3).map(tuple),
)
def test_any_checkpoint_formats_and_parses_back(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...]
) -> None:
    checkpoint = Checkpoint(origin, size, root, extensions)
    assert parse_checkpoint(format_checkpoint(checkpoint)) == checkpoint


def test_without_cryptography_keys_read_and_signing_says_what_is_missing() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["cryptography"] = None  # every import of it now fails
        from cadence_store.errors import InvalidInputError
        from cadence_store.journal import notes
        assert not [name for name in sys.modules if name.startswith("cryptography.")]
        verifier = notes.parse_verifier_key({PETER_VERIFIER!r})
        for call in (
            lambda: notes.parse_signer_key({PETER_SIGNER!r}),
            lambda: notes.generate_signer_key("x"),
            lambda: notes.verify_note({TEXT + chr(10) + PETER_SIG!r}, verifier),
        ):
            try:
                call()
            except InvalidInputError as error:
                assert error.code == "signing-library-missing", error
                assert "pip install cryptography" in str(error)
            else:
                raise AssertionError("signed without cryptography")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@given(message=st.one_of(st.text(), st.binary()), key=st.text())
def test_any_input_is_read_or_refused_with_a_code(message: str | bytes, key: str) -> None:
    """Never an IndexError, ValueError or UnicodeError: every refusal is coded."""
    verified = _code(verify_note, message, PETER_VERIFIER)
    assert verified in {"checkpoint-malformed", "checkpoint-signature-invalid"}
    if isinstance(message, str):
        assert _code(parse_checkpoint, message) in {"checkpoint-malformed", "accepted"}
    assert _code(parse_verifier_key, key) == "checkpoint-key-invalid"
    assert _code(parse_signer_key, key) == "checkpoint-key-invalid"
    assert _code(parse_note, TEXT + "\n— " + key + "\n") in {"checkpoint-malformed", "accepted"}
