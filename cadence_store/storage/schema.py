"""Running cadence-store's Alembic migrations, adopting cadence 1.x stores, head checks.

`upgrade(url_or_engine)` is `alembic upgrade head` made safe for a journal:
- the whole upgrade, the adoption stamp included, is one transaction (BEGIN IMMEDIATE on
  SQLite, where Alembic alone would autocommit each DDL step; a transaction-level
  advisory lock on PostgreSQL, so concurrent upgraders do the work once);
- a database without `cadence_store_version` is inspected first, reading only: fresh
  (none of the cadence table names), a cadence 1.x store (stamped at its revision, then
  upgraded), or anything else (refused with `StoreFormatError`, left byte for byte as it
  was — not even the journal mode changes before this check).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import (
    CadenceStoreError,
    InvalidInputError,
    MigrationError,
    SchemaOutOfDateError,
    StoreBusyError,
    StoreFormatError,
)
from . import legacy
from . import sqlite_pragmas as pragmas
from .dialects import POSTGRESQL
from .engine import (
    begin_write,
    create_store_engine,
    enable_wal,
    is_postgresql,
    is_sqlite,
    masked_url,
    url_argument,
)
from .failures import READ, WRITE, database_errors, is_database_error, translate_database_error
from .models import OWNED_TABLES
from .readiness import forget_store_ready as forget_pool

if TYPE_CHECKING:
    # Alembic is imported where a migration or a revision lookup needs it, not at import:
    # `import cadence_store` (the pytest plugin loads it in every run) stays cheap.
    from alembic.config import Config

VERSION_TABLE: Final = "cadence_store_version"
SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
BRANCH_LABEL: Final = "cadence_store"
# One lock id for every cadence-store upgrade on a PostgreSQL server.
_UPGRADE_LOCK_ID: Final = int.from_bytes(
    hashlib.sha256(b"cadence-store:upgrade").digest()[:8], "big", signed=True
)

logger = logging.getLogger(__name__)


def script_location() -> str:
    """The migration scripts: packaged inside the wheel, else the source tree's."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise MigrationError("run-store-migration-failed", "migration scripts not found")


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", script_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise MigrationError("run-store-migration-failed", f"expected one head, found {heads}")
    return heads[0]


def require_schema_name(schema: object) -> str | None:
    """A PostgreSQL schema name for cadence-store's tables (None: the default schema)."""
    if schema is None:
        return None
    if not isinstance(schema, str) or SCHEMA_NAME.fullmatch(schema) is None:
        raise InvalidInputError("invalid-schema-name", "a schema name is [A-Za-z_][A-Za-z0-9_]*")
    return schema


def store_schema(bind: Connection | Engine) -> str | None:
    """The schema a migration or transfer connection (or engine) puts cadence tables in
    (its translate map)."""
    translate = bind.get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def _version_options(schema: str | None) -> dict[str, Any]:
    return {"version_table": VERSION_TABLE, "version_table_schema": schema}


def current_revision(connection: Connection, schema: str | None = None) -> str | None:
    """The cadence-store revision of a database (None when it has none)."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts=_version_options(schema))
    heads = context.get_current_heads()
    return heads[0] if heads else None


def database_label(connection: Connection) -> str:
    url = connection.engine.url
    if is_sqlite(connection):
        return url.database or ":memory:"
    return masked_url(url)


def database_label_of(engine: Engine) -> str:
    """`database_label` of an engine: the file, or the URL with its password masked."""
    url = engine.url
    return (url.database or ":memory:") if is_sqlite(engine) else masked_url(url)


def _log_step(verb: str, label: str, found: str | None, reached: str | None) -> None:
    if found == reached:
        logger.debug("cadence-store: %s is at %s already", label, reached)
    else:
        logger.info("cadence-store: %s %s from %s to %s", verb, label, found or "nothing", reached)


def adopt_if_needed(connection: Connection) -> str | None:
    """Inspect a database that has no cadence-store version; stamp a cadence 1.x store.

    Returns the revision stamped, or None for a database that is fresh for cadence-store
    (or already versioned). Raises `StoreFormatError` for anything else, having only read.
    Must run inside the upgrade transaction.
    """
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    schema = store_schema(connection)
    names = set(inspect(connection).get_table_names(schema=schema))
    clashing = names & legacy.CADENCE_TABLE_NAMES
    if VERSION_TABLE in names or not clashing:
        return None
    label = database_label(connection)
    revision, difference = (
        legacy.assess_legacy(pragmas.query_of(connection), names)
        if is_sqlite(connection)
        else (None, "cadence 1.x stores are SQLite files")
    )
    if revision is None:
        # A database of nothing but cadence 1.x's tables is a damaged run store; one that
        # holds other tables too is a host's, sharing a name by chance.
        dedicated = names <= set(legacy.LEGACY_TABLES) | legacy.CADENCE_TABLE_NAMES
        logger.warning(
            "cadence-store: refusing %s: it holds %s but is not a cadence 1.x run store "
            "this version can adopt (%s); it is left untouched",
            label,
            ", ".join(sorted(clashing)),
            difference,
        )
        raise StoreFormatError(
            label,
            "not a cadence 1.x run store this version can adopt",
            clashing_tables=() if dedicated else sorted(clashing),
            schema=schema,
        )
    logger.info("cadence-store: adopting the cadence 1.x store %s at revision %s", label, revision)
    context = MigrationContext.configure(connection, opts=_version_options(schema))
    context.stamp(ScriptDirectory.from_config(alembic_config()), revision)
    return revision


def schema_options(schema: str | None) -> dict[str, Any]:
    """Execution options that put cadence tables in `schema` (PostgreSQL), for
    connections that touch only cadence-store's tables (migrations, transfer, reads)."""
    checked = require_schema_name(schema)
    return {} if checked is None else {"schema_translate_map": {None: checked}}


@contextmanager
def migration_transaction(engine: Engine, schema: str | None = None) -> Iterator[Connection]:
    """One transaction for a whole upgrade: locked, adopted, committed or rolled back."""
    options = schema_options(schema)
    if options and not is_postgresql(engine):
        raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
    with database_errors(WRITE):
        opened = engine.connect()
    with opened as connection:
        if options:
            connection.execution_options(**options)
        try:
            begin_write(connection)  # IMMEDIATE on SQLite, configured by the host or not
            if is_postgresql(connection):
                connection.exec_driver_sql(
                    "SELECT pg_advisory_xact_lock(%(lock)s)", {"lock": _UPGRADE_LOCK_ID}
                )
            if schema is not None:
                quoted = connection.dialect.identifier_preparer.quote_schema(schema)
                connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
                # Alembic renders some DDL (ALTER TABLE ... ADD COLUMN) unqualified
                connection.exec_driver_sql(f"SET LOCAL search_path TO {quoted}")
            elif is_postgresql(connection):
                # the store's statements name the default schema (`public`); a pooled
                # connection's leftover search_path must not put the tables elsewhere
                connection.exec_driver_sql(f"SET LOCAL search_path TO {POSTGRESQL.default_schema}")
            adopt_if_needed(connection)
            yield connection
            connection.commit()
        except Exception as error:
            connection.rollback()
            failure = _migration_failure(error)
            if failure is error:
                raise
            raise failure from error
        except BaseException:
            connection.rollback()
            raise


def _migration_failure(error: Exception) -> Exception:
    """Busy and unavailable databases keep their codes; any other failure of a step is
    the migration's (classified by result code or SQLSTATE, as everywhere)."""
    if isinstance(error, CadenceStoreError):
        return error
    if is_database_error(error):
        translated = translate_database_error(error, WRITE)
        if isinstance(translated, StoreBusyError) or translated.code == "run-store-unavailable":
            return translated
    return MigrationError("run-store-migration-failed", f"{type(error).__name__}: {error}")


def forget_store_ready(connection: Connection) -> None:
    """Check the engine of `connection` again on next use (after an upgrade or a
    downgrade through it)."""
    forget_pool(connection.engine.pool)


def upgrade(
    bind: str | URL | Engine, revision: str = "heads", *, schema: str | None = None
) -> str | None:
    """Bring a database to `revision` (head by default), adopting a cadence 1.x store.

    `schema` (PostgreSQL) keeps the cadence tables and their version table in their own
    schema. Returns the revision the database is at afterwards.
    """
    from alembic import command

    engine = create_store_engine(bind) if not isinstance(bind, Engine) else bind
    try:
        with migration_transaction(engine, schema) as connection:
            found = current_revision(connection, store_schema(connection))
            command.upgrade(alembic_config(connection), revision)
            reached = current_revision(connection, store_schema(connection))
            forget_store_ready(connection)
        _log_step("upgraded", database_label_of(engine), found, reached)
        if is_sqlite(engine):
            with engine.connect() as connection:
                enable_wal(connection)
        return reached
    finally:
        if engine is not bind:
            engine.dispose()


def downgrade(bind: str | URL | Engine, revision: str, *, schema: str | None = None) -> str | None:
    """Step a database back to `revision`."""
    from alembic import command

    engine = create_store_engine(bind) if not isinstance(bind, Engine) else bind
    try:
        with migration_transaction(engine, schema) as connection:
            found = current_revision(connection, store_schema(connection))
            command.downgrade(alembic_config(connection), revision)
            forget_store_ready(connection)
            reached = current_revision(connection, store_schema(connection))
        _log_step("downgraded", database_label_of(engine), found, reached)
        return reached
    finally:
        if engine is not bind:
            engine.dispose()


def upgrade_command(url: URL | str, schema: str | None = None) -> str:
    """The command that brings `url` to head, with every option it needs (a schema only
    where there are schemas: never for SQLite)."""
    command = f"cadence-store upgrade --url {url_argument(url, always_quote=True)}"
    try:
        sqlite = make_url(url).get_backend_name() == "sqlite"
    except (ArgumentError, ValueError, TypeError):
        sqlite = False
    return command if schema is None or sqlite else f"{command} --schema {schema}"


def assert_at_head(connection: Connection, schema: str | None = None) -> None:
    """Refuse a database that is not at the head revision, naming the command to run."""
    with database_errors(READ):
        revision = current_revision(connection, schema)
    if revision != head_revision():
        command = upgrade_command(connection.engine.url, schema)
        found = revision or "no cadence-store schema"
        raise SchemaOutOfDateError(
            f"database is at {found}, head is {head_revision()}; run: {command}",
            command=command,
        )


def owned_tables_present(connection: Connection) -> set[str]:
    names = inspect(connection).get_table_names(schema=store_schema(connection))
    return set(names) & set(OWNED_TABLES)


def comparison_filter(connection: Connection) -> Any:
    """`include_object` for comparing the models with a database (autogenerate, `alembic
    check`): only the owned tables, and on SQLite no constraint that the database already
    enforces in an equivalent form.

    Adopted cadence 1.x stores declare their unique keys unnamed and their foreign keys
    inline (`REFERENCES runs(run_id) ON DELETE CASCADE`), which SQLAlchemy reflects without
    names and without ON DELETE. SQLite's own catalogue (index_list, foreign_key_list) says
    whether the model's constraint is enforced; only then is the difference ignored.
    """
    sqlite = is_sqlite(connection)

    def include(
        object: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if type_ == "table":
            return name in OWNED_TABLES
        table = getattr(getattr(object, "table", None), "name", None)
        if table not in OWNED_TABLES:
            return False
        if not sqlite or compare_to is not None:
            return True
        if type_ == "unique_constraint":
            columns = frozenset(column.name for column in object.columns)
            return columns not in pragmas.unique_keys(pragmas.query_of(connection), table)
        if type_ == "foreign_key_constraint":
            wanted = {
                (
                    element.parent.name,
                    element.column.table.name,
                    element.column.name,
                    str(object.ondelete or "NO ACTION").upper(),
                )
                for element in object.elements
            }
            enforced = pragmas.foreign_keys(pragmas.query_of(connection), table)
            if reflected:
                # reflected from an inline REFERENCES (options lost): the model's side of
                # the comparison decides whether SQLite enforces the same key
                return not {key[:3] for key in wanted} <= {key[:3] for key in enforced}
            return not wanted <= enforced
        return True

    return include


_SCHEMA_FROM_ENVIRONMENT: Final = object()


def host_include_object(
    object: Any,
    name: str | None,
    type_: str,
    reflected: bool,
    compare_to: Any,
    *,
    schema: str | None | object = _SCHEMA_FROM_ENVIRONMENT,
) -> bool:
    """Pass as a host env.py's `include_object`: its autogenerate ignores cadence tables.

    A table is cadence-store's only when both its name and its schema match: `schema` is
    where the cadence tables live (bind it with `functools.partial(host_include_object,
    schema="cadence")`); by default `$CADENCE_STORE_SCHEMA`, else the default schema. A
    host's own `public.events` is its own table, and stays in its autogenerate.
    """
    cadence_schema = (
        os.environ.get("CADENCE_STORE_SCHEMA") or None
        if schema is _SCHEMA_FROM_ENVIRONMENT
        else schema
    )
    table = object if type_ == "table" else getattr(object, "table", None)
    table_name = name if type_ == "table" else getattr(table, "name", None)
    if table_name not in OWNED_TABLES and table_name != VERSION_TABLE:
        return True
    return (getattr(table, "schema", None) or None) != cadence_schema
