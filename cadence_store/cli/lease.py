"""Operation leases: `lease acquire|renew|commit|interrupt|status`."""

from __future__ import annotations

from typing import Any

import click

from ..errors import LeaseFencedError
from ..store.run_store import RunStore
from .group import (
    CONTEXT_SETTINGS,
    lease_argument,
    main,
    opened,
    print_json,
    read_json_argument,
    url_option,
)
from .render import with_additions

# -- leases ------------------------------------------------------------------------------------


@main.group(context_settings=CONTEXT_SETTINGS)
def lease() -> None:
    """Operation leases: acquire, renew, commit, interrupt (leases are JSON).

    A lease that is fenced (expired, replaced or already committed) is refused with
    `error: lease-fenced` and exit 3, like every refusal of the store. Acquiring a lease
    on a committed operation starts it again and clears its outcome (see `lease status`).

    \b
    Example: cadence-store lease acquire RUN_ID apply-1 --ttl-ms 60000 > lease.json
    """


_ttl_option = click.option(
    "--ttl-ms", default=60_000, show_default=True, type=int, help="Lease lifetime (ms)."
)


@lease.command(name="acquire")
@click.argument("run_id")
@click.argument("operation_id")
@_ttl_option
@click.option("--preempt", is_flag=True, help="Replace a live lease (fencing its holder).")
@click.option("--exclusive", is_flag=True, help="Fail if the operation is already running.")
@url_option
def lease_acquire(
    run_id: str, operation_id: str, ttl_ms: int, preempt: bool, exclusive: bool, url: str | None
) -> None:
    """Acquire (or rejoin) the lease of an operation; prints the lease JSON.

    `fence` grows with each new grant of the operation: pass it to resources outside
    the database, which refuse any fence lower than the highest they have seen.

    \b
    Example: cadence-store lease acquire RUN_ID apply-1 --ttl-ms 60000 --preempt
    """
    with opened(url, create=True) as store:
        granted = store.acquire_lease(
            run_id, operation_id, ttl_ms, preempt=preempt, exclusive=exclusive
        )
    print_json(with_additions(granted))


@lease.command(name="renew")
@click.argument("lease_json", metavar="LEASE")
@_ttl_option
@url_option
def lease_renew(lease_json: str, ttl_ms: int, url: str | None) -> None:
    """Extend a live lease; prints the renewed lease JSON.

    \b
    Example: cadence-store lease renew @lease.json --ttl-ms 60000
    """
    with opened(url, create=True) as store:
        renewed = store.renew_lease(lease_argument(lease_json), ttl_ms)
    print_json(with_additions(renewed))


@lease.command(name="commit")
@click.argument("lease_json", metavar="LEASE")
@click.option("--outcome", default="{}", show_default=True, metavar="JSON", help="Outcome object.")
@url_option
def lease_commit(lease_json: str, outcome: str, url: str | None) -> None:
    """Commit a live lease with its outcome; prints the recorded outcome.

    \b
    Example: cadence-store lease commit @lease.json --outcome '{"applied": true}'
    """
    value = read_json_argument(outcome, "operation-outcome-invalid")
    checked = lease_argument(lease_json)
    with opened(url, create=True) as store:
        try:
            recorded = store.commit_lease(checked, value)
        except LeaseFencedError as error:
            raise _explained(store, checked, error) from None
    print_json(recorded)


def _explained(store: RunStore, lease: dict[str, Any], error: LeaseFencedError) -> LeaseFencedError:
    """`error`, saying so when this very grant already committed (not expired or replaced)."""
    run_id = lease.get("runId", lease.get("run_id"))
    operation_id = lease.get("operationId", lease.get("operation_id"))
    if not isinstance(run_id, str) or not isinstance(operation_id, str):
        return error
    status = store.inspect_operation(run_id, operation_id)
    fence = lease.get("fence", 0)
    if status is None or status.state != "committed" or fence not in (0, status.fence):
        return error
    return LeaseFencedError(
        error.code,
        f"the lease of {operation_id} was already committed; its outcome is recorded "
        f"(see `cadence-store lease status {run_id} {operation_id}`)",
    )


@lease.command(name="interrupt")
@click.argument("lease_json", metavar="LEASE")
@url_option
def lease_interrupt(lease_json: str, url: str | None) -> None:
    """Give up a live lease (the operation is recorded as interrupted).

    \b
    Example: cadence-store lease interrupt @lease.json
    """
    checked = lease_argument(lease_json)
    with opened(url, create=True) as store:
        store.interrupt_lease(checked)
    print_json(
        {
            "runId": checked.get("runId", checked.get("run_id")),
            "operationId": checked.get("operationId", checked.get("operation_id")),
            "state": "interrupted",
        }
    )


@lease.command(name="status")
@click.argument("run_id")
@click.argument("operation_id")
@url_option
def lease_status(run_id: str, operation_id: str, url: str | None) -> None:
    """An operation's state, outcome, lease expiry and current or last fence as JSON
    (null if unknown).

    \b
    Example: cadence-store lease status RUN_ID apply-1
    """
    with opened(url) as store:
        status = store.inspect_operation(run_id, operation_id)
    print_json(None if status is None else with_additions(status))
