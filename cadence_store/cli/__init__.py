"""The `cadence-store` command.

Every command works on one database: `--url`, else `$CADENCE_STORE_URL`, else the
embedded default — the cadence 1.x owner-private store of the current directory
(`RunStore.open(resolve_state_root(cwd))`, a SQLite file under `$XDG_STATE_HOME` or
`~/.local/state`). Read-only commands never create that store.

Exit codes: 0 ok, 1 verification found corruption, 2 usage or invalid input, 3 the store
refused (a fenced, expired or replaced lease included), needs an upgrade, is busy or
unavailable. An expected failure prints `error: <code>` and what to do, never a
traceback, and never a password.

This package is a face over the public API: one module per command group, no table
models and no SQL (tests/cli/test_read_commands.py scans it).
"""

# the commands register
from . import (
    checkpoints,
    demo,
    follow,
    inspect,
    lease,
    operate,
    retention,
    serve,
    transfer,
    verify,
)
from .group import main

__all__ = [
    "checkpoints",
    "demo",
    "follow",
    "inspect",
    "lease",
    "main",
    "operate",
    "retention",
    "serve",
    "transfer",
    "verify",
]
