"""Writing, for operators: `start`, `bind-change`, `transition` and `bind-delivery`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from .group import default_root_hash, lease_argument, main, opened, url_option

F = TypeVar("F", bound=Callable[..., Any])

# -- writing (for operators) ------------------------------------------------------------------


def _operation_option(function: F) -> F:
    return click.option(
        "--operation-id",
        required=True,
        help="Idempotency key: repeating a command with it returns the recorded result.",
    )(function)


def _lease_option(function: F) -> F:
    return click.option(
        "--lease",
        metavar="JSON",
        help="Fence with this lease (JSON from `lease acquire`, '-' for stdin, @FILE).",
    )(function)


@main.command()
@click.option("--stage", required=True, help="abel-design or abel-implement.")
@_operation_option
@click.option("--change", help="The change the run is for.")
@click.option("--provisional-key", help="sha256 key of a design run without a change yet.")
@click.option("--alias", "aliases", multiple=True, help="Extra provisional key (repeatable).")
@click.option(
    "--root-hash",
    help="Consumer root hash (with --url; default: sha256 of the current directory's real "
    "path). The embedded store uses its state root's.",
)
@url_option
def start(
    stage: str,
    operation_id: str,
    change: str | None,
    provisional_key: str | None,
    aliases: Sequence[str],
    root_hash: str | None,
    url: str | None,
) -> None:
    """Start (or find) a run; prints its projection as JSON.

    \b
    Example: cadence-store start --stage abel-implement --change add-login --operation-id start-1
    """
    if not url and root_hash is not None:
        raise click.UsageError(
            "--root-hash needs --url: the embedded store uses its state root's hash"
        )
    with opened(
        url, root_hash=(root_hash or default_root_hash()) if url else None, create=True
    ) as store:
        projection = store.start_run(
            stage,
            operation_id=operation_id,
            change=change,
            provisional_key=provisional_key,
            provisional_aliases=list(aliases) if aliases else None,
        )
    click.echo(projection.to_json())


@main.command(name="bind-change")
@click.argument("run_id")
@click.argument("change")
@_operation_option
@url_option
def bind_change(run_id: str, change: str, operation_id: str, url: str | None) -> None:
    """Bind a change to a provisional design run; prints its projection.

    \b
    Example: cadence-store bind-change RUN_ID add-login --operation-id bind-change-1
    """
    with opened(url, create=True) as store:
        projection = store.bind_change(run_id, change, operation_id=operation_id)
    click.echo(projection.to_json())


@main.command()
@click.argument("run_id")
@click.argument("state")
@_operation_option
@click.option("--code", help="Pause / reason code recorded with the transition.")
@_lease_option
@url_option
def transition(
    run_id: str,
    state: str,
    operation_id: str,
    code: str | None,
    lease: str | None,
    url: str | None,
) -> None:
    """Move a run to STATE (a legal transition); prints its projection.

    \b
    Example: cadence-store transition RUN_ID paused --code operator-pause --operation-id pause-1
    """
    with opened(url, create=True) as store:
        projection = store.transition(
            run_id, state, operation_id=operation_id, code=code, lease=lease_argument(lease)
        )
    click.echo(projection.to_json())


@main.command(name="bind-delivery")
@click.argument("run_id")
@click.option("--gate", required=True, help="gate-a or gate-b.")
@click.option("--revision", required=True, type=int, help="Delivery revision (>= 1).")
@click.option("--receipt-hash", required=True, help="sha256 of the gate receipt.")
@_operation_option
@click.option("--approval-revision", type=int, help="Approval proof: revision.")
@click.option("--contract-hash", help="Approval proof: contract hash.")
@click.option("--record-hash", help="Approval proof: record hash.")
@_lease_option
@url_option
def bind_delivery(
    run_id: str,
    gate: str,
    revision: int,
    receipt_hash: str,
    operation_id: str,
    approval_revision: int | None,
    contract_hash: str | None,
    record_hash: str | None,
    lease: str | None,
    url: str | None,
) -> None:
    """Record the gate receipt a run was admitted under; prints its projection.

    \b
    Example: cadence-store bind-delivery RUN_ID --gate gate-a --revision 1 \\
      --receipt-hash HASH --operation-id bind-1
    """
    proof_parts = (approval_revision, contract_hash, record_hash)
    if any(part is not None for part in proof_parts) and None in proof_parts:
        raise click.UsageError(
            "an approval proof needs --approval-revision, --contract-hash and --record-hash"
        )
    proof = (
        None
        if approval_revision is None
        else {
            "revision": approval_revision,
            "contract_hash": contract_hash,
            "record_hash": record_hash,
        }
    )
    with opened(url, create=True) as store:
        projection = store.bind_delivery(
            run_id,
            gate,
            revision,
            receipt_hash,
            operation_id=operation_id,
            approval_proof=proof,
            lease=lease_argument(lease),
        )
    click.echo(projection.to_json())
