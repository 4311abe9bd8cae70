"""The hook where a run's page gets the newest signed checkpoint covering the run and
the run's inclusion proof. Checkpoints are not stored yet: until they are, no checkpoint
covers any run, and the page says so."""

from __future__ import annotations

from dataclasses import dataclass

from ..repository.run_repository import RunRepository


@dataclass(frozen=True)
class CoveringCheckpoint:
    """A signed checkpoint (its note text) and the run's inclusion proof in its tree."""

    note: str
    tree_size: int
    leaf_index: int
    proof: tuple[str, ...]


def covering_checkpoint(runs: RunRepository, run_id: str) -> CoveringCheckpoint | None:
    """The newest checkpoint covering `run_id`, read in the page's snapshot; None while
    the store keeps no checkpoints."""
    del runs, run_id  # read here once the store keeps checkpoints
    return None
