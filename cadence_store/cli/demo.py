"""`cadence-store demo`: a scripted run lifecycle that shows what the journal does."""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable

import click

from ..errors import LeaseFencedError, StateRootError
from ..journal import ApprovalProof
from ..storage.engine import url_argument
from ..store.run_store import RunStore
from .group import (
    create_store_file,
    default_root_hash,
    describe,
    embedded_root,
    main,
    opened,
    remember,
    url_option,
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_demo(
    store: RunStore, location: str, echo: Callable[[str], object], *, url: str | None = None
) -> None:
    """Design run -> change bound -> implement run with an approved delivery -> transitions
    -> a lease fenced and replaced -> verification of every run in the store.

    The follow-up commands it suggests name `url` (masked) when the store is not the
    embedded one."""
    tag = f"demo-{uuid.uuid4().hex[:8]}"
    root = store.state_root
    echo(f"cadence-store demo ({tag})")
    echo(f"store: {location}")

    design = store.start_run(
        "abel-design", provisional_key=_sha(f"{tag}:draft"), operation_id=f"{tag}-design-start"
    )
    echo(f" 1. started design run {design.run_id} (state {design.state}, provisional key)")
    design = store.bind_change(design.run_id, tag, operation_id=f"{tag}-bind-change")
    echo(f" 2. bound change {tag} to it (sequence {design.sequence})")
    store.transition(
        design.run_id, "paused", code="awaiting-review", operation_id=f"{tag}-design-review"
    )
    design = store.transition(design.run_id, "completed", operation_id=f"{tag}-design-done")
    echo(" 3. design run: created -> paused (awaiting-review) -> completed")

    run = store.start_run("abel-implement", change=tag, operation_id=f"{tag}-implement-start")
    echo(f" 4. started implement run {run.run_id} for change {tag}")
    proof = ApprovalProof(
        revision=1, contract_hash=_sha(f"{tag}:contract"), record_hash=_sha(f"{tag}:record")
    )
    run = store.bind_delivery(
        run.run_id,
        "gate-a",
        1,
        _sha(f"{tag}:gate-a receipt"),
        operation_id=f"{tag}-bind-gate-a",
        approval_proof=proof,
    )
    echo(
        f" 5. bound delivery gate-a revision 1 with approval proof r{proof.revision} "
        f"(delivery revision {run.delivery_revision})"
    )
    for state in ("validating-delivery", "ready", "running"):
        run = store.transition(run.run_id, state, operation_id=f"{tag}-to-{state}")
    echo(" 6. implement run: created -> validating-delivery -> ready -> running")

    operation = f"{tag}-verify"
    first = store.acquire_lease(run.run_id, operation, 60_000)
    second = store.acquire_lease(run.run_id, operation, 60_000, preempt=True)
    echo(
        f" 7. lease {first.token[:8]} acquired for {operation}, then preempted by lease "
        f"{second.token[:8]}"
    )
    try:
        store.transition(run.run_id, "verifying", operation_id=f"{tag}-stale", lease=first)
    except LeaseFencedError as error:
        echo(f" 8. the replaced lease tried to move the run and was fenced: {error.code}")
    else:  # pragma: no cover - the journal's fencing guarantees this
        raise AssertionError("a replaced lease was not fenced")
    run = store.transition(run.run_id, "verifying", operation_id=f"{tag}-verify-go", lease=second)
    store.commit_lease(second, {"verified": True, "runId": run.run_id})
    echo(f" 9. the live lease moved it to {run.state} and committed its outcome")

    run_ids = store.run_ids()
    for run_id in run_ids:
        store.verify_integrity(run_id)
    echo(
        f"10. verified {len(run_ids)} run(s), {store.counts().events} event(s): every hash "
        "chain and stored projection intact"
    )
    echo("")
    if root is not None:
        echo(f"The store lives at {root.database_path}")
        echo(f"  (owner-only state root of {root.consumer_root}; nothing was written here).")
    else:
        echo(f"The store lives at {location}.")
    where = f" --url {url_argument(url)}" if url else ""  # pasteable: no *** in it
    echo(f"Look around: cadence-store runs{where}; cadence-store show {run.run_id}{where}")


def _temporary_store_url() -> str:
    """A new SQLite file in a private temporary directory (0700), kept after the demo so
    that its suggested commands work."""
    directory = tempfile.mkdtemp(prefix="cadence-store-demo-")
    return f"sqlite:///{os.path.join(directory, 'demo.sqlite3')}"


@main.command()
@url_option
def demo(url: str | None) -> None:
    """A scripted lifecycle on the embedded store: runs, bindings, leases, verification.

    Prints every step and where the store lives. Where the current directory cannot
    have an embedded store (run from the home directory), the demo uses a new store in
    a temporary directory instead; with --url it uses that database (a SQLite file that
    does not exist yet is created).

    \b
    Example: cadence-store demo
    Example: cadence-store demo --url sqlite:///demo.sqlite3
    """
    if url is None:
        try:
            embedded_root()
        except StateRootError as error:
            url = remember(_temporary_store_url())
            click.echo(f"No embedded store here ({error.code}): using a temporary store.")
    if url is not None:
        create_store_file(url)
    with opened(url, root_hash=default_root_hash() if url else None, create=True) as store:
        run_demo(store, describe(store), click.echo, url=url)
