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
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import (
    CadenceStoreError,
    InvalidInputError,
    MigrationError,
    SchemaOutOfDateError,
    StoreBusyError,
    StoreFormatError,
    StorePermissionError,
)
from . import legacy
from . import sqlite_pragmas as pragmas
from .backends import backend_for, backend_of_url
from .engine import create_store_engine, url_argument
from .failures import READ, WRITE, database_errors, is_database_error, translate_database_error
from .models import OWNED_TABLES
from .readiness import forget_store_ready as forget_pool

if TYPE_CHECKING:
    # Alembic is imported where a migration or a revision lookup needs it, not at import:
    # `import cadence_store` (the pytest plugin loads it in every run) stays cheap.
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE: Final = "cadence_store_version"
SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
BRANCH_LABEL: Final = "cadence_store"

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
def script_directory() -> ScriptDirectory:
    """cadence-store's revision scripts (read once: they do not change while running)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


@functools.cache
def head_revision() -> str:
    heads = script_directory().get_heads()
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
    return backend_for(connection).database_label(connection)


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

    schema = store_schema(connection)
    names = set(inspect(connection).get_table_names(schema=schema))
    clashing = names & legacy.CADENCE_TABLE_NAMES
    if VERSION_TABLE in names or not clashing:
        return None
    label = database_label(connection)
    revision, difference = (
        legacy.assess_legacy(pragmas.query_of(connection), names)
        if backend_for(connection).embedded
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
    context.stamp(script_directory(), revision)
    return revision


def schema_options(schema: str | None) -> dict[str, Any]:
    """Execution options that put cadence tables in `schema` (PostgreSQL), for
    connections that touch only cadence-store's tables (migrations, transfer, reads)."""
    checked = require_schema_name(schema)
    return {} if checked is None else {"schema_translate_map": {None: checked}}


@contextmanager
def migration_transaction(
    bind: Engine | Connection, schema: str | None = None
) -> Iterator[Connection]:
    """One transaction for a whole upgrade: locked, adopted, committed or rolled back.

    On an engine, a connection of its own. On a caller's connection (a host env.py's), the
    caller's transaction when one is open: the caller commits or rolls it back, and gets
    its connection back as it was (schema translation, search_path). A connection with
    no transaction open gets one of its own, committed here.
    """
    # refused before connecting: connecting would create a missing SQLite file
    backend = backend_for(bind)
    if require_schema_name(schema) is not None and not backend.named_schemas:
        raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
    if isinstance(bind, Engine):
        with database_errors(WRITE):
            opened = bind.connect()
        with opened as connection, migration_transaction(connection, schema) as migrating:
            yield migrating
        return
    connection = bind
    schema = store_schema(connection) if schema is None else schema
    owned = not connection.in_transaction()
    translation = connection.get_execution_options().get("schema_translate_map")
    translated = schema is not None and translation != {None: schema}
    try:
        if owned:
            connection.begin()
        if translated:
            connection.execution_options(**schema_options(schema))
        callers_search_path = None if owned else backend.search_path(connection)
        # a second upgrader waits; unqualified DDL goes to the store's schema
        backend.lock_migration(connection, schema)
        adopt_if_needed(connection)
        yield connection
        if callers_search_path is not None:
            connection.execute(SET_SEARCH_PATH, {"path": callers_search_path})
        if owned:
            connection.commit()
    except Exception as error:
        if owned:
            connection.rollback()
        failure = _migration_failure(error)
        if failure is error:
            raise
        raise failure from error
    except BaseException:
        if owned:
            connection.rollback()
        raise
    finally:
        if translated:
            connection.execution_options(schema_translate_map=translation)


SET_SEARCH_PATH: Final = text("SELECT set_config('search_path', :path, true)")


def _migration_failure(error: Exception) -> Exception:
    """Busy, unavailable and refused (a privilege) databases keep their codes; any other
    failure of a step is the migration's (classified by result code or SQLSTATE, as
    everywhere)."""
    if isinstance(error, CadenceStoreError):
        return error
    if is_database_error(error):
        translated = translate_database_error(error, WRITE)
        kept = isinstance(translated, StoreBusyError | StorePermissionError)
        if kept or translated.code == "run-store-unavailable":
            return translated
    return MigrationError("run-store-migration-failed", f"{type(error).__name__}: {error}")


def forget_store_ready(connection: Connection) -> None:
    """Check the engine of `connection` again on next use (after an upgrade or a
    downgrade through it)."""
    forget_pool(connection.engine.pool)


def upgrade(
    bind: str | URL | Engine | Connection, revision: str = "heads", *, schema: str | None = None
) -> str | None:
    """Bring a database to `revision` (head by default), adopting a cadence 1.x store.

    `bind` is a URL, an engine, or a connection: a host's own Alembic env.py passes its
    migration connection, and the migrations run on it, inside its transaction (the host
    commits or rolls back both histories together), without touching the host's
    `alembic.context`. `schema` (PostgreSQL) keeps the cadence tables and their version
    table in their own schema. Returns the revision the database is at afterwards.
    """
    return _migrate(bind, revision, schema, backwards=False)


def downgrade(
    bind: str | URL | Engine | Connection, revision: str, *, schema: str | None = None
) -> str | None:
    """Step a database back to `revision` (`"base"`: no cadence-store tables); `bind` as
    for `upgrade`. Returns the revision the database is at afterwards."""
    return _migrate(bind, revision, schema, backwards=True)


def _migrate(
    bind: str | URL | Engine | Connection, target: str, schema: str | None, *, backwards: bool
) -> str | None:
    """`upgrade` and `downgrade`: one path for URLs, engines and a caller's connection."""
    from .revision_scripts import run_revision_scripts

    where = bind if isinstance(bind, Engine | Connection) else create_store_engine(bind)
    try:
        with migration_transaction(where, schema) as connection:
            store = store_schema(connection)
            found = current_revision(connection, store)
            run_revision_scripts(
                connection,
                script_directory(),
                target,
                backwards=backwards,
                options=_version_options(store),
            )
            reached = current_revision(connection, store)
            forget_store_ready(connection)
            label = database_label(connection)
        _log_step("downgraded" if backwards else "upgraded", label, found, reached)
        # WAL outside any transaction; a caller's connection keeps its engine's mode
        if isinstance(where, Engine) and not backwards:
            with where.connect() as connection:
                backend_for(where).after_upgrade(connection)
        return reached
    finally:
        if where is not bind and isinstance(where, Engine):
            where.dispose()


def upgrade_command(url: URL | str, schema: str | None = None) -> str:
    """The command that brings `url` to head, with every option it needs (a schema only
    where there are schemas: never for SQLite)."""
    command = f"cadence-store upgrade --url {url_argument(url, always_quote=True)}"
    try:
        backend = backend_of_url(make_url(url))
    except (ArgumentError, ValueError, TypeError):
        backend = None
    schemaless = backend is not None and not backend.named_schemas
    return command if schema is None or schemaless else f"{command} --schema {schema}"


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
    # SQLite's own catalogue (the embedded engine's) says what it enforces
    sqlite = backend_for(connection).embedded

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
