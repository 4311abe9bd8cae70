"""A throwaway PostgreSQL primary with a synchronous streaming standby (standard library).

``replicated_pair()`` builds, on this machine's PostgreSQL binaries (as
tests/pg_cluster.py does, as the ``postgres`` user when we are root):

1. a primary (``initdb``, unix socket only, ``synchronous_commit=on``) with the database
   ``cadence_test``;
2. a standby from ``pg_basebackup -R`` (``application_name=s1``), streaming over the
   primary's unix socket;
3. then ``synchronous_standby_names='s1'`` on the primary only (set after the base
   backup, so a promoted standby does not wait for a standby of its own, which would
   hang every commit: NOTES-engines), and waits until ``pg_stat_replication`` reports
   the standby ``sync`` (it reads ``async`` first).

``pair.kill_primary()`` sends SIGKILL to the primary's postmaster; ``pair.promote()``
runs ``pg_ctl promote``. Each server has its own directory and the same three layers of
cleanup as tests/pg_cluster.py (``finally``, ``atexit``, a watchdog process).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pg_cluster import (
    _RUN_AS,
    _START_TIMEOUT_S,
    _WATCHDOG,
    DATABASE,
    SUPERUSER,
    _as_owner,
    _Cleanup,
    _conf_quote,
    _free_port,
    _run,
    find_pg_bin,
    pg_available,
)
from sqlalchemy import create_engine, text

__all__ = ["ReplicatedPair", "Server", "replicated_pair"]

STANDBY_NAME = "s1"
SYNC_WAIT_S = 60


@dataclass
class Server:
    root: Path  # data/, server.log and the unix socket
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def host(self) -> str:
        """``DIR:PORT``, one host of a multi-host URL."""
        return f"{self.root}:{self.port}"

    def url(self, database: str = DATABASE) -> str:
        return (
            f"postgresql+psycopg://{SUPERUSER}@/{database}"
            f"?host={quote(str(self.root), safe='/')}&port={self.port}"
        )

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])


@dataclass
class ReplicatedPair:
    primary: Server
    standby: Server
    bindir: Path

    def multi_host_url(self, database: str = DATABASE) -> str:
        """Both servers, the one that accepts writes wins (what a writer should use)."""
        return (
            f"postgresql+psycopg://{SUPERUSER}@/{database}?host={self.primary.host}"
            f"&host={self.standby.host}&target_session_attrs=read-write"
        )

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster (its backends exit on their own at once)."""
        os.kill(self.primary.postmaster_pid(), signal.SIGKILL)

    def promote(self) -> None:
        _run(
            _as_owner([str(self.bindir / "pg_ctl"), "-D", str(self.standby.data), "-w", "promote"]),
            self.standby.root,
            "pg_ctl promote",
            log=self.standby.log,
        )


def _new_root(prefix: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    if os.geteuid() == 0:
        owner = pwd.getpwnam(_RUN_AS)
        os.chown(root, owner.pw_uid, owner.pw_gid)
        os.chmod(root, 0o755)  # the socket lives here; keep it reachable
    return root


def _guard(bindir: Path, server: Server, stack: contextlib.ExitStack) -> None:
    """Stop and remove `server` on exit, on interpreter exit, or when we die."""
    stop_cmd = _as_owner(
        [str(bindir / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "-w", "stop"]
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, *stop_cmd, str(server.root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    cleanup = _Cleanup(stop_cmd, server.root, watchdog)
    atexit.register(cleanup)

    def release() -> None:
        cleanup()
        atexit.unregister(cleanup)

    stack.callback(release)


def _configure(server: Server, settings: dict[str, str]) -> None:
    with (server.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write("\n# replicated test pair (tests/pg_replication.py)\n")
        conf.writelines(f"{key} = {value}\n" for key, value in settings.items())


def _start(bindir: Path, server: Server) -> None:
    _run(
        _as_owner(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(server.data),
                "-l",
                str(server.log),
                "-w",
                "-t",
                str(_START_TIMEOUT_S),
                "-s",
                "start",
            ]
        ),
        server.root,
        "pg_ctl start",
        log=server.log,
    )


def _wait_for_sync_standby(primary: Server) -> None:
    engine = create_engine(primary.url("postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(
                text(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            )
            connection.execute(text("SELECT pg_reload_conf()"))
            deadline = time.monotonic() + SYNC_WAIT_S
            while True:
                state = connection.execute(
                    text("SELECT sync_state FROM pg_stat_replication WHERE application_name = :n"),
                    {"n": STANDBY_NAME},
                ).scalar()
                if state == "sync":
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"standby never became synchronous (state {state!r})")
                time.sleep(0.05)
    finally:
        engine.dispose()


@contextlib.contextmanager
def replicated_pair() -> Iterator[ReplicatedPair]:
    ok, reason = pg_available()
    if not ok:
        raise RuntimeError(reason)
    bindir = find_pg_bin()
    assert bindir is not None
    with contextlib.ExitStack() as stack:
        primary = Server(_new_root("cadence-pg-primary-"), _free_port())
        _guard(bindir, primary, stack)
        standby = Server(_new_root("cadence-pg-standby-"), _free_port())
        _guard(bindir, standby, stack)

        _run(
            _as_owner(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(primary.data),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            primary.root,
            "initdb",
        )
        _configure(
            primary,
            {
                "listen_addresses": _conf_quote(""),
                "unix_socket_directories": _conf_quote(str(primary.root)),
                "unix_socket_permissions": "0777",
                "port": str(primary.port),
                "max_connections": "50",
                "wal_level": "replica",
                "max_wal_senders": "4",
                "synchronous_commit": "on",
                "hot_standby": "on",
                # a standby retries its WAL source every 5 s by default; promoted right
                # after the primary died, it would wait that long (NOTES-engines)
                "wal_retrieve_retry_interval": _conf_quote("100ms"),
                "fsync": "off" if os.environ.get("CADENCE_PG_FAST") == "1" else "on",
            },
        )
        _start(bindir, primary)
        _run(
            [
                str(bindir / "createdb"),
                "-h",
                str(primary.root),
                "-p",
                str(primary.port),
                "-U",
                SUPERUSER,
                DATABASE,
            ],
            primary.root,
            "createdb",
            log=primary.log,
        )
        _run(
            _as_owner(
                [
                    str(bindir / "pg_basebackup"),
                    "-D",
                    str(standby.data),
                    "-d",
                    f"host={primary.root} port={primary.port} user={SUPERUSER} "
                    f"application_name={STANDBY_NAME}",
                    "-R",
                    "-X",
                    "stream",
                    "--checkpoint=fast",  # the default spread checkpoint takes minutes
                    "--no-sync",
                ]
            ),
            standby.root,
            "pg_basebackup",
            log=primary.log,
        )
        _configure(
            standby,
            {
                "unix_socket_directories": _conf_quote(str(standby.root)),
                "port": str(standby.port),
            },
        )
        _start(bindir, standby)
        _wait_for_sync_standby(primary)
        yield ReplicatedPair(primary, standby, bindir)
