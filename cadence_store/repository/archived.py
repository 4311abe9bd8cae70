"""What an archived run answers: `run-archived`, naming it, on the not-found path of every
call that names a run (a run that is found costs nothing more), and for a fresh start
that replays one of its operation ids or names a key it kept."""

from __future__ import annotations

from ..errors import RunArchivedError, RunNotFoundError
from ..journal.vocabulary import DESIGN_STAGE
from ..storage.retention_statements import ARCHIVED_RUN, ARCHIVED_START
from ..storage.statements import Statements


def archived(run_id: str) -> RunArchivedError:
    """`run-archived` naming `run_id`."""
    return RunArchivedError(
        "run-archived", f"run {run_id} was archived (its archive file holds it)", run_id=run_id
    )


def missing_run(sql: Statements, run_id: str) -> RunNotFoundError:
    """The error for a run id no `runs` row has: `run-archived` when an archive deleted
    the run, else `run-not-found` (one indexed read)."""
    if sql.one(ARCHIVED_RUN, run_id=run_id) is not None:
        return archived(run_id)
    return RunNotFoundError("run-not-found")


def refuse_archived_start(
    sql: Statements, root_hash: str, stage: str, operation_id: str, primary_key: str
) -> None:
    """`run-archived` for a fresh start that replays an archived run's operation id, or
    that names the lookup key an archived run held, in a stage whose finished runs keep
    their key (a finished design run gives its key up: a new run may take it, archived
    or not). One indexed read of each."""
    found = sql.one(
        ARCHIVED_START,
        root_hash=root_hash,
        stage=stage,
        operation_id=operation_id,
        lookup_key=None if stage == DESIGN_STAGE else primary_key,
    )
    if found is not None:
        raise archived(found.run_id)


__all__ = ["archived", "missing_run", "refuse_archived_start"]
