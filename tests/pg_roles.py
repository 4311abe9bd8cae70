"""A throwaway PostgreSQL login role on a test database, for tests of what a role with
fewer rights (or fewer connection slots) than the owner sees."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


@contextmanager
def login_role(
    database_url: str, prefix: str, table_rights: str, *, connection_limit: int | None = None
) -> Iterator[str]:
    """The URL of a new role that may connect to `database_url`'s database, use its
    `public` schema and do `table_rights` (e.g. "SELECT", "ALL") on every table there;
    `connection_limit` caps its connections. Its sessions end and it is dropped after."""
    role = f"{prefix}_{secrets.token_hex(4)}"
    limit = "" if connection_limit is None else f" CONNECTION LIMIT {int(connection_limit)}"
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    database = make_url(database_url).database
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {role} LOGIN{limit}"))
        connection.execute(text(f'GRANT CONNECT ON DATABASE "{database}" TO {role}'))
        connection.execute(text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        connection.execute(text(f"GRANT {table_rights} ON ALL TABLES IN SCHEMA public TO {role}"))
    try:
        yield make_url(database_url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :role"
                ),
                {"role": role},
            )
            connection.execute(text(f"DROP OWNED BY {role}"))
            connection.execute(text(f"DROP ROLE {role}"))
        admin.dispose()
