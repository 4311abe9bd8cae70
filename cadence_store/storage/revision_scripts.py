"""Running cadence-store's revision scripts on a connection, without Alembic's `context`.

`alembic.command` runs an env.py inside an `EnvironmentContext`, which installs itself as
the process-wide `alembic.context` and empties it on exit: nested in a host's own
`alembic upgrade` (a host env.py calling `cadence_store.upgrade(connection)`), it would
tear down the host's context under the host. Here a `MigrationContext` runs the steps the
`ScriptDirectory` computes, and only `alembic.op`, which the scripts use, is bound for
the duration, then given back exactly as it was (a host revision's, or nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

if TYPE_CHECKING:
    from alembic.runtime.migration import MigrationContext, RevisionStep
    from alembic.script import ScriptDirectory


def run_revision_scripts(
    connection: Connection,
    scripts: ScriptDirectory,
    target: str,
    *,
    backwards: bool,
    options: dict[str, Any],
) -> None:
    """Move the database on `connection` to `target` (down to it when `backwards`), inside
    the transaction the connection has open; `options` name the version table."""
    from alembic.runtime.migration import MigrationContext, MigrationStep

    # the steps `alembic.command.upgrade` / `downgrade` hand an env.py, in their order
    def steps(heads: tuple[str, ...], _context: MigrationContext) -> list[RevisionStep]:
        revision_map = scripts.revision_map
        if backwards:
            down = scripts.iterate_revisions(heads, target, select_for_downgrade=True)
            return [MigrationStep.downgrade_from_script(revision_map, script) for script in down]
        up = reversed(list(scripts.iterate_revisions(target, heads, implicit_base=True)))
        return [MigrationStep.upgrade_from_script(revision_map, script) for script in up]

    context = MigrationContext.configure(
        connection, opts={**options, "script": scripts, "fn": steps}
    )
    with _operations_bound_to(context):
        context.run_migrations()


@contextmanager
def _operations_bound_to(context: MigrationContext) -> Iterator[None]:
    """`alembic.op` bound to `context` while the scripts run. `Operations.context` alone
    would leave `op` unbound afterwards (and bound to us after a failure), breaking a host
    revision that is running or runs next."""
    from alembic import op
    from alembic.operations import Operations

    namespace = vars(op)
    before = dict(namespace)
    try:
        with Operations.context(context):
            yield
    finally:
        for name in namespace.keys() - before.keys():
            del namespace[name]
        namespace.update(before)
