"""The `cadence-store` command."""

from __future__ import annotations

import sys

import click

from .engine import masked_url
from .errors import CadenceStoreError
from .schema import upgrade as upgrade_database


@click.group()
def main() -> None:
    """cadence-store: a durable, hash-chained run journal."""


@main.command()
@click.option("--url", envvar="CADENCE_STORE_URL", required=True, help="Database URL.")
def upgrade(url: str) -> None:
    """Bring a database to the head revision (adopting a cadence 1.x store).

    Example: cadence-store upgrade --url sqlite:///control.sqlite3
    """
    try:
        revision = upgrade_database(url)
    except CadenceStoreError as error:
        click.echo(f"error: {error.code}: {error.detail or ''}".rstrip(": "), err=True)
        sys.exit(3)
    click.echo(f"{masked_url(url)} is at {revision}")
