"""Ed25519 keys in the signed-note encoding that `golang.org/x/mod/sumdb/note` reads.

Verifier key `<name>+<8 hex key id>+<base64(0x01 || 32-byte public key)>`, signer key
`PRIVATE+KEY+<name>+<8 hex key id>+<base64(0x01 || 32-byte seed)>`, key id the first 4
bytes (big-endian) of `SHA-256(name || 0x0A || 0x01 || public key)` (C2SP signed-note).

Ed25519 comes from pyca/cryptography (extra `sign`), imported only when a key signs,
verifies or is derived; reading a verifier key needs nothing. A signer key's seed is
never in a repr or an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Final

from ..errors import InvalidInputError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

CHECKPOINT_KEY_INVALID: Final = "checkpoint-key-invalid"
SIGNING_LIBRARY_MISSING: Final = "signing-library-missing"
ED25519: Final = 0x01  # the signed-note signature type of Ed25519
KEY_SIZE: Final = 32
_KEY_ID: Final = re.compile(r"[0-9a-f]{8}")
_SIGNER_PREFIX: Final = "PRIVATE+KEY+"


def is_key_name(name: object) -> bool:
    """A signed-note key name: non-empty UTF-8, no Unicode space, no `+`, no control
    character."""
    return (
        isinstance(name, str)
        and name != ""
        and "+" not in name
        and not any(char.isspace() or char < " " or "\ud800" <= char <= "\udfff" for char in name)
    )


def key_id(name: str, public_key: bytes) -> int:
    """The key id of an Ed25519 public key under `name`."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([ED25519]) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


def strict_b64decode(text: str) -> bytes | None:
    """Standard base64 (RFC 4648 §4) in its one canonical spelling, else None."""
    if not text.isascii():
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


@dataclass(frozen=True)
class VerifierKey:
    """A public key that checks a signer's notes; `str(key)` is its encoding."""

    name: str
    key_id: int
    public_key: bytes

    def encode(self) -> str:
        """The verifier key text `<name>+<key id>+<base64 key>`."""
        key = base64.b64encode(bytes([ED25519]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_id:08x}+{key}"

    def __str__(self) -> str:
        return self.encode()

    def verifies(self, message: bytes, signature: bytes) -> bool:
        """Whether `signature` is this key's Ed25519 signature of `message`."""
        public = _public_key(self.public_key)
        from cryptography.exceptions import InvalidSignature

        try:
            public.verify(signature, message)
        except InvalidSignature:
            return False
        return True


class SignerKey:
    """A private key that signs notes. Its seed stays out of `repr` and errors; `encode()`
    is the only way to write it down."""

    __slots__ = ("_private", "_seed", "key_id", "name", "public_key")

    def __init__(self, name: str, seed: bytes) -> None:
        if not is_key_name(name):
            raise InvalidInputError(
                CHECKPOINT_KEY_INVALID, "a key name is non-empty, no space or +"
            )
        if not isinstance(seed, bytes) or len(seed) != KEY_SIZE:
            raise InvalidInputError(CHECKPOINT_KEY_INVALID, "an Ed25519 seed is 32 bytes")
        self._seed = seed
        self._private = _private_key(seed)
        self.name = name
        self.public_key = _raw_public_key(self._private)
        self.key_id = key_id(name, self.public_key)

    def __repr__(self) -> str:
        return f"SignerKey(name={self.name!r}, key_id={self.key_id:08x})"

    def encode(self) -> str:
        """The signer key text `PRIVATE+KEY+<name>+<key id>+<base64 seed>`: a secret."""
        seed = base64.b64encode(bytes([ED25519]) + self._seed).decode("ascii")
        return f"{_SIGNER_PREFIX}{self.name}+{self.key_id:08x}+{seed}"

    def verifier(self) -> VerifierKey:
        """The verifier key of this signer."""
        return VerifierKey(self.name, self.key_id, self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of `message` (deterministic, RFC 8032)."""
        return self._private.sign(message)


def generate_signer_key(name: str) -> SignerKey:
    """A new random signer key named `name`."""
    return SignerKey(name, secrets.token_bytes(KEY_SIZE))


def parse_verifier_key(text: str) -> VerifierKey:
    """Read a verifier key; anything else is `checkpoint-key-invalid`."""
    name, claimed_id, key = _split_key(text, "a verifier key is <name>+<8 hex id>+<base64 key>")
    if key_id(name, key) != claimed_id:
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, "the verifier key's id is not its key's")
    return VerifierKey(name, claimed_id, key)


def parse_signer_key(text: str) -> SignerKey:
    """Read a signer key; anything else is `checkpoint-key-invalid`, without the key's
    text in the message."""
    usage = "a signer key is PRIVATE+KEY+<name>+<8 hex key id>+<base64 seed>"
    if not isinstance(text, str) or not text.startswith(_SIGNER_PREFIX):
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, usage)
    name, claimed_id, seed = _split_key(text.removeprefix(_SIGNER_PREFIX), usage)
    signer = SignerKey(name, seed)
    if signer.key_id != claimed_id:
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, "the signer key's id is not its key's")
    return signer


def _split_key(text: object, usage: str) -> tuple[str, int, bytes]:
    """`<name>+<key id>+<base64(0x01 || 32 bytes)>` split and decoded."""
    parts = text.split("+", 2) if isinstance(text, str) else []  # base64 may hold a +
    if len(parts) != 3 or not is_key_name(parts[0]) or not _KEY_ID.fullmatch(parts[1]):
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, usage)
    raw = strict_b64decode(parts[2])
    if raw is None or len(raw) != 1 + KEY_SIZE:
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, usage)
    if raw[0] != ED25519:
        raise InvalidInputError(CHECKPOINT_KEY_INVALID, "only Ed25519 keys (type 0x01) are known")
    return parts[0], int(parts[1], 16), raw[1:]


def _ed25519_module() -> ModuleType:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as error:
        raise InvalidInputError(
            SIGNING_LIBRARY_MISSING,
            "Ed25519 needs pyca/cryptography: pip install cryptography (the extra `sign`)",
        ) from error
    return ed25519


def _private_key(seed: bytes) -> Ed25519PrivateKey:
    private: Ed25519PrivateKey = _ed25519_module().Ed25519PrivateKey.from_private_bytes(seed)
    return private


def _public_key(raw: bytes) -> Ed25519PublicKey:
    public: Ed25519PublicKey = _ed25519_module().Ed25519PublicKey.from_public_bytes(raw)
    return public


def _raw_public_key(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes_raw()


__all__ = [
    "CHECKPOINT_KEY_INVALID",
    "SIGNING_LIBRARY_MISSING",
    "SignerKey",
    "VerifierKey",
    "generate_signer_key",
    "is_key_name",
    "key_id",
    "parse_signer_key",
    "parse_verifier_key",
    "strict_b64decode",
]
