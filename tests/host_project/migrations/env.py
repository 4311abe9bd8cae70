"""The orders application's Alembic environment, with cadence-store inside it.

`alembic upgrade` / `downgrade` run the application's revisions and then cadence-store's
migrations, on the same connection and in the same transaction: both histories move, or
neither does. cadence-store keeps its own version table and follows its own head; the
application's downgrades leave it alone unless asked.

-x url=URL             the database
-x cadence_store=REV   move cadence-store to REV (for example `base`) instead of its head
-x cadence_schema=NAME cadence-store's tables in their own PostgreSQL schema
-x cadence_first=true  cadence-store's migrations before the application's (either order
                       works; the tests run both)
"""

import functools

from alembic import context
from orders_app import Base
from sqlalchemy import Connection, create_engine

import cadence_store

options = context.get_x_argument(as_dictionary=True)
cadence_schema = options.get("cadence_schema")
cadence_target = options.get("cadence_store", "heads")


def migrate_cadence_store(connection: Connection) -> None:
    if cadence_target == "heads":
        cadence_store.upgrade(connection, schema=cadence_schema)
    else:
        cadence_store.downgrade(connection, cadence_target, schema=cadence_schema)


def run_migrations_online() -> None:
    # SQLite: configure_engine makes every transaction real (BEGIN IMMEDIATE), so that
    # DDL rolls back with the rest; other engines are returned as they are
    engine = cadence_store.configure_engine(create_engine(options["url"]))
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=Base.metadata,
                include_object=functools.partial(
                    cadence_store.host_include_object, schema=cadence_schema
                ),
                compare_type=True,
                transactional_ddl=True,  # one transaction for every step, on SQLite too
            )
            # upgrade, downgrade and stamp give the migration context a destination;
            # `alembic check`, `current` and `revision` do not, and leave cadence-store be
            moves = context.get_context().opts.get("destination_rev") is not None
            with context.begin_transaction():
                if moves and options.get("cadence_first") == "true":
                    migrate_cadence_store(connection)
                context.run_migrations()
                if moves and options.get("cadence_first") != "true":
                    migrate_cadence_store(connection)
    finally:
        engine.dispose()


run_migrations_online()
