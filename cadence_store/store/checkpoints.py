"""`RunStore`'s transparency-tree calls as transactions: a checkpoint numbers the feed
(its own short write, as a writer's notifier would), then extends, signs and records in
one write; a verification reads the signature, the tree and every chain in one snapshot;
the proofs are reads."""

from __future__ import annotations

import logging

from ..errors import InvalidInputError
from ..journal.note_keys import (
    CHECKPOINT_KEY_INVALID,
    SignerKey,
    VerifierKey,
    parse_signer_key,
    parse_verifier_key,
)
from ..journal.notes import verify_checkpoint
from ..journal.tree_views import (
    CheckpointReport,
    ConsistencyProof,
    InclusionProof,
    SignedCheckpoint,
)
from ..repository.checkpoints import TreeCheckpoints
from ..repository.core import Clock, JournalAccess
from ..repository.run_repository import RunRepository
from .transactions import Transactions

logger = logging.getLogger(__name__)


def _part(runs: RunRepository, clock: Clock | None = None) -> TreeCheckpoints:
    return TreeCheckpoints(JournalAccess(runs.transaction, clock))


def signer_of(key: object) -> SignerKey:
    """A `SignerKey`, or its encoded text (surrounding whitespace ignored, as a key file's
    final newline); anything else is `checkpoint-key-invalid` (never echoing the text)."""
    if isinstance(key, SignerKey):
        return key
    if isinstance(key, str):
        return parse_signer_key(key.strip())
    raise InvalidInputError(CHECKPOINT_KEY_INVALID, "a signer key is a SignerKey or its text")


def verifier_of(key: object) -> VerifierKey:
    """A `VerifierKey`, or its encoded text."""
    if isinstance(key, VerifierKey):
        return key
    if isinstance(key, str):
        return parse_verifier_key(key.strip())
    raise InvalidInputError(CHECKPOINT_KEY_INVALID, "a verifier key is a VerifierKey or its text")


def checkpoint(
    transactions: Transactions, clock: Clock | None, key: SignerKey | str, origin: str | None
) -> SignedCheckpoint:
    """See `RunStore.checkpoint`."""
    signer = signer_of(key)
    origin = signer.name if origin is None else origin
    transactions.write(lambda runs: runs.number_feed())
    signed = transactions.write(lambda runs: _part(runs, clock).checkpoint(signer, origin))
    # the key's name and id only: they are in the note too
    logger.debug(
        "cadence-store: checkpoint of %d leaves (root %s) signed by %s+%08x",
        signed.size,
        signed.root_hash,
        signer.name,
        signer.key_id,
    )
    return signed


def verify(
    transactions: Transactions, note: str | bytes, vkey: VerifierKey | str
) -> CheckpointReport:
    """See `RunStore.verify_checkpoint`."""
    signed = verify_checkpoint(note, verifier_of(vkey))

    def work(runs: RunRepository) -> CheckpointReport:
        tree_size = _part(runs).verify_tree(signed)
        run_count = events = 0
        for run_id in runs.run_ids():
            events += runs.verify_integrity(run_id).sequence
            run_count += 1
        return CheckpointReport(
            size=signed.size,
            root_hash=signed.root_hash.hex(),
            tree_size=tree_size,
            runs_verified=run_count,
            events_verified=events,
        )

    return transactions.read(work)


def verify_kept_leaves(transactions: Transactions) -> int:
    """The leaves archives kept, each checked against the stored tree (`verify` of a
    store that archived runs): how many."""
    return transactions.read(lambda runs: _part(runs).verify_kept_leaves())


def inclusion_proof(
    transactions: Transactions, run_id: str, sequence: int | None, size: int | None
) -> InclusionProof:
    """See `RunStore.inclusion_proof`."""
    return transactions.read(lambda runs: _part(runs).inclusion_proof(run_id, sequence, size))


def consistency_proof(transactions: Transactions, old_size: int, new_size: int) -> ConsistencyProof:
    """See `RunStore.consistency_proof`."""
    return transactions.read(lambda runs: _part(runs).consistency_proof(old_size, new_size))


__all__ = [
    "checkpoint",
    "consistency_proof",
    "inclusion_proof",
    "signer_of",
    "verifier_of",
    "verify",
    "verify_kept_leaves",
]
