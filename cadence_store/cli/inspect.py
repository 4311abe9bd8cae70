"""Reading a store: `upgrade`, `info`, `runs`, `show` and `events`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from ..journal import RUN_STAGES, RUN_STATES, js_stringify
from ..storage.backends import backend_for
from ..storage.engine import create_store_engine, masked_url
from ..storage.failures import READ, database_errors
from ..storage.schema import current_revision, head_revision, schema_options, upgrade_command
from ..storage.schema import upgrade as upgrade_database
from ..store.run_store import RunStore
from ..store.state_root import StateRoot

if TYPE_CHECKING:
    from sqlalchemy import Engine

from . import render
from .group import (
    describe,
    json_option,
    main,
    opened,
    print_json,
    remember,
    require_store_file,
    schema_for,
    url_option,
)

# -- upgrade and info ---------------------------------------------------------------------


@main.command()
@url_option
def upgrade(url: str | None) -> None:
    """Bring a database to the head revision (adopting a cadence 1.x store).

    Without --url (or $CADENCE_STORE_URL) the embedded store of the current directory is
    upgraded (and created if it does not exist).

    \b
    Example: cadence-store upgrade --url sqlite:///control.sqlite3
    """
    if url:
        remember(url)
        revision = upgrade_database(url, schema=schema_for(url))
        click.echo(f"{masked_url(url)} is at {revision} (head)")
        return
    with opened(None, create=True) as store:
        with store.engine.connect() as connection:
            revision = current_revision(connection)
        click.echo(f"{describe(store)} is at {revision} (head)")


def _store_details(engine: Engine, schema: str | None, root: StateRoot | None) -> dict[str, Any]:
    """Engine, database, revision and (for a store at head) counts, read without writing."""
    with database_errors(READ), engine.connect() as connection:
        connection.execution_options(**schema_options(schema))
        details: dict[str, Any] = {
            "engine": f"{backend_for(engine).name} ({engine.driver})",
            "database": masked_url(engine.url),
        }
        if schema is not None:
            details["schema"] = schema
        if root is not None:
            details["path"] = root.database_path
            details["consumerRoot"] = root.consumer_root
            details["rootHash"] = root.consumer_root_hash
        details["revision"] = current_revision(connection, schema)
        details["head"] = head_revision()
        connection.rollback()
    if details["revision"] == details["head"]:  # a store not at head is refused
        with RunStore(engine, schema=schema) as store:
            details.update(store.counts().to_dict())  # camelCase: `byState`
    return details


def _print_details(details: dict[str, Any]) -> None:
    labels = {"consumerRoot": "consumer root", "rootHash": "root hash"}
    shown = {labels.get(k, k): v for k, v in details.items()}
    by_state = shown.pop("byState", None)
    head = shown.pop("head")
    shown["revision"] = f"{details['revision'] or '(none)'}" + (
        " (head)" if shown.pop("atHead") else f" (head is {head}: upgrade required)"
    )
    if by_state:
        shown["states"] = ", ".join(f"{state} {count}" for state, count in by_state.items())
    render.console().print(render.key_values(shown))


@main.command()
@url_option
@json_option
def info(url: str | None, as_json: bool) -> None:
    """Engine, database (password masked), schema revision vs head, run and event counts.

    Reads only: a missing SQLite file or embedded store is reported, never created.

    \b
    Example: cadence-store info --url postgresql+psycopg://app:secret@db/cadence
    """
    schema = schema_for(url)
    if url:
        remember(url)
        require_store_file(url)
        engine = create_store_engine(url)
        try:
            details = _store_details(engine, schema, None)
        finally:
            engine.dispose()
    else:  # through RunStore.open: the state root's ownership checks and upgrade
        with opened(None) as store:
            details = _store_details(store.engine, None, store.state_root)
    at_head = details["revision"] == details["head"]
    details["atHead"] = at_head
    if as_json:
        click.echo(json.dumps(details, ensure_ascii=False))
    else:
        _print_details(details)
    if not at_head:
        command = upgrade_command(url, schema) if url else "cadence-store upgrade"
        click.echo(f"error: run-store-upgrade-required\n  run: {command}", err=True)
        sys.exit(render.EXIT_STORE)


# -- reading runs ---------------------------------------------------------------------------


@main.command(name="runs")
@url_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(RUN_STATES),
    help="Only runs in this state (repeatable).",
)
@click.option("--stage", type=click.Choice(RUN_STAGES), help="Only runs of this stage.")
@click.option("--change", help="Only runs bound to this change.")
@click.option("--root-hash", help="Only runs of this consumer root hash.")
@click.option(
    "--limit", type=click.IntRange(min=1), metavar="N", help="At most N runs (in run id order)."
)
@click.option("--after", metavar="RUN_ID", help="Only runs whose id sorts after RUN_ID (a page).")
@json_option
def list_runs(
    url: str | None,
    states: Sequence[str],
    stage: str | None,
    change: str | None,
    root_hash: str | None,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """List runs (filter by state, stage, change); --json prints one projection per line.

    With --limit, runs come in run id order, a page at a time: the next page starts
    --after the last id shown.

    \b
    Example: cadence-store runs --stage abel-implement --state running --state paused
    Example: cadence-store runs --limit 100 --after 3f0c...
    """
    with opened(url) as store:
        listed = store.list_runs(
            stage=stage or None,
            state=states or None,
            change=change or None,
            root_hash=root_hash or None,
            limit=limit,
            after=after,
        )
    paged = limit is not None or after is not None
    # by stage, then run id (stable sort); a page keeps run id order, which pages follow
    rows = listed if paged else sorted(listed, key=lambda run: run.stage)
    if as_json:
        for row in rows:
            click.echo(row.to_json())
        return
    listing = render.table("RUN ID", "STAGE", "CHANGE / KEY", "STATE", "SEQ", "DELIVERY", "PAUSE")
    for row in rows:
        key = row.change or (
            f"provisional {render.short(row.provisional_key)}" if row.provisional_key else None
        )
        listing.add_row(
            row.run_id,
            row.stage,
            render.text(key),
            row.state,
            str(row.sequence),
            render.text(row.delivery_revision),
            render.text(row.pause_code),
        )
    out = render.console()
    out.print(listing)
    out.print(f"{len(rows)} run(s) in {describe(store)}")
    if limit is not None and len(rows) == limit:
        out.print(f"next page: add --after {rows[-1].run_id}")


@main.command()
@click.argument("run_id")
@url_option
@json_option
def show(run_id: str, url: str | None, as_json: bool) -> None:
    """A run: projection, delivery bindings, operations and leases, state timeline.

    \b
    Example: cadence-store show 8ffecc31-80bd-4ba5-88d6-963b08ad4b23
    """
    now = render.now_ms()
    with opened(url) as store:
        detail = store.run_detail(run_id)
    if as_json:
        print_json(
            {
                "status": detail.projection.document(),
                "deliveryBindings": [b.to_dict() for b in detail.delivery_bindings],
                "operations": [
                    {
                        "operationId": o.operation_id,
                        "kind": o.kind,
                        "state": str(o.state),
                        "lease": render.lease_label(o.lease),
                        "expiresAt": o.expires_at,
                        "fence": o.fence,
                    }
                    for o in detail.operations
                ],
                "timeline": [step.to_dict() for step in detail.timeline],
                "createdAt": detail.created_at,
                "updatedAt": detail.updated_at,
            }
        )
        return
    render.print_run_detail(detail, now=now)


@main.command(name="events")
@click.argument("run_id")
@url_option
@json_option
def list_events(run_id: str, url: str | None, as_json: bool) -> None:
    """A run's events in order; --json prints one cadence 1.x event object per line.

    \b
    Example: cadence-store events 8ffecc31-80bd-4ba5-88d6-963b08ad4b23 --json
    """
    with opened(url) as store:
        if as_json:
            for event in store.iter_events(run_id):
                print_json(
                    {
                        "sequence": event.sequence,
                        "type": event.type,
                        "payload": event.payload,
                        "priorHash": event.prior_hash,
                        "hash": event.hash,
                    }
                )
            return
        listing = render.table("SEQ", "TYPE", "PAYLOAD", "PRIOR HASH", "HASH", "RECORDED")
        for event in store.iter_events(run_id):
            listing.add_row(
                str(event.sequence),
                event.type,
                js_stringify(event.payload),
                render.short(event.prior_hash),
                render.short(event.hash),
                render.local_time(event.recorded_at),
            )
    render.console().print(listing)
