"""Alembic environment of cadence-store.

- The version table is `cadence_store_version`, so these migrations sit beside a host
  application's own `alembic_version` history.
- A connection passed in `config.attributes["connection"]` is used as
  `cadence_store.upgrade(connection)` uses it: inside its owner's transaction if one is
  open (else in one of its own), locked, a cadence 1.x store on it recognised and stamped
  before the migrations run. (`cadence_store.upgrade` itself runs the scripts without this
  file: a host's `alembic.context` stays the host's.)
- A plain `alembic upgrade head` (URL from `-x url=...`, `CADENCE_STORE_URL` or
  `sqlalchemy.url`) gets the same treatment through `cadence_store.storage.schema`: one
  transaction, adoption of cadence 1.x stores, and an engine that is disposed afterwards
  because this file created it.
- Logging is configured only when alembic's own command line runs with an ini file, never
  when a host embeds these migrations.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context

from cadence_store.storage import models
from cadence_store.storage.engine import create_store_engine
from cadence_store.storage.schema import (
    VERSION_TABLE,
    comparison_filter,
    migration_transaction,
    store_schema,
)

config = context.config


def _url() -> str:
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("CADENCE_STORE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise SystemExit("cadence-store: no database URL; pass -x url=... or set CADENCE_STORE_URL")
    return url


def _configure(**options) -> None:
    connection = options.get("connection")
    schema = store_schema(connection) if connection is not None else _schema()
    context.configure(
        target_metadata=models.metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        # only the owned tables take part in comparisons (`alembic check`)
        include_object=comparison_filter(connection) if connection is not None else None,
        compare_type=True,
        render_as_batch=True,
        **options,
    )


def _schema():
    return context.get_x_argument(as_dictionary=True).get("schema") or os.environ.get(
        "CADENCE_STORE_SCHEMA"
    )


def run_migrations_offline() -> None:
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        # the owner of the connection holds its transaction (if it began one); the lock,
        # the adoption of a cadence 1.x store and the schema are cadence_store.upgrade's
        with migration_transaction(connection) as migrating:
            _configure(connection=migrating)
            with context.begin_transaction():
                context.run_migrations()
        return
    if config.config_file_name is not None and config.attributes.get("configure_logger", True):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    engine = create_store_engine(_url())
    try:
        with migration_transaction(engine, _schema()) as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
