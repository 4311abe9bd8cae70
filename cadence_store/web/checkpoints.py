"""The hook where a run's page gets the newest signed checkpoint covering the run and
the run's inclusion proof: the newest recorded checkpoint, when its tree holds the run's
newest event (a run appended to since is not covered until the next checkpoint)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError
from ..repository.checkpoints import TreeCheckpoints
from ..repository.core import JournalAccess
from ..repository.run_repository import RunRepository


@dataclass(frozen=True)
class CoveringCheckpoint:
    """A signed checkpoint (its note text) and the run's inclusion proof in its tree."""

    note: str
    tree_size: int
    leaf_index: int
    proof: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """`{"note", "treeSize", "leafIndex", "hashes": [base64...]}`."""
        return {
            "note": self.note,
            "treeSize": self.tree_size,
            "leafIndex": self.leaf_index,
            "hashes": list(self.proof),
        }


def covering_checkpoint(runs: RunRepository, run_id: str) -> CoveringCheckpoint | None:
    """The newest checkpoint covering `run_id`'s newest event, read in the page's
    snapshot; None when there is none (no checkpoint yet, or the run grew since)."""
    tree = TreeCheckpoints(JournalAccess(runs.transaction, None))
    try:
        proof = tree.inclusion_proof(run_id, None, None)
    except InvalidInputError:  # no checkpoint recorded, or the event is not in its tree
        return None
    return CoveringCheckpoint(
        note=proof.checkpoint,
        tree_size=proof.tree_size,
        leaf_index=proof.leaf_index,
        proof=tuple(base64.b64encode(hash_).decode("ascii") for hash_ in proof.hashes),
    )
