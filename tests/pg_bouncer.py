"""A throwaway PgBouncer in front of a throwaway PostgreSQL server (standard library).

``pgbouncer_in_front(server_url, pool_mode="transaction")`` writes a private
``pgbouncer.ini`` (loopback only, a free port chosen now, its unix socket in its own
temporary directory, ``auth_type=trust``), starts ``pgbouncer`` in the foreground as the
``postgres`` user when we are root (as tests/pg_cluster.py runs PostgreSQL), waits until
it answers and yields a `Bouncer` with the SQLAlchemy URL through it. On exit it is
stopped and its directory removed; a watchdog process does the same if we die.

``restart_server(server_url)`` restarts the server behind it (``pg_ctl restart -m
fast``), the outage a pooler has to ride through.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pg_cluster import _RUN_AS, _as_owner, _free_port, _run, find_pg_bin

__all__ = [
    "Bouncer",
    "pgbouncer_available",
    "pgbouncer_in_front",
    "restart_server",
    "start_server",
    "stop_server",
]

START_TIMEOUT_S = 30

# argv = [pid, root]; on EOF of stdin (our parent ended or died) stop pgbouncer, clean up
_WATCHDOG = """\
import os, shutil, signal, sys
pid, root = int(sys.argv[1]), sys.argv[2]
try:
    sys.stdin.buffer.read()
except BaseException:
    pass
try:
    os.killpg(pid, signal.SIGTERM)
except OSError:
    pass
shutil.rmtree(root, ignore_errors=True)
"""


def pgbouncer_available() -> tuple[bool, str]:
    binary = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )
    if binary is None:
        return False, "pgbouncer is not installed (Debian package: pgbouncer)"
    return True, binary


@dataclass
class Bouncer:
    url: str  # SQLAlchemy URL of the database through PgBouncer
    port: int
    root: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> Path:
        return self.root / "pgbouncer.log"


def server_socket(server_url: str) -> tuple[str, int]:
    """The unix socket directory and port of a tests/pg_cluster.py URL."""
    query = parse_qs(urlsplit(server_url).query)
    return query["host"][0], int(query["port"][0])


def _pg_ctl(server_url: str, *args: str) -> None:
    bindir = find_pg_bin()
    assert bindir is not None
    root = Path(server_socket(server_url)[0])
    command = [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "server.log")]
    _run(_as_owner([*command, *args]), root, f"pg_ctl {args[-1]}", log=root / "server.log")


def stop_server(server_url: str) -> None:
    """Stop the PostgreSQL server of `server_url` (fast: backends are told to exit)."""
    _pg_ctl(server_url, "-m", "fast", "-w", "-s", "stop")


def start_server(server_url: str) -> None:
    _pg_ctl(server_url, "-w", "-s", "start")


def restart_server(server_url: str, down_s: float = 0.0) -> None:
    """Stop the server of `server_url`, keep it down `down_s` seconds, start it again."""
    stop_server(server_url)
    time.sleep(down_s)
    start_server(server_url)


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({process.returncode}):\n{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"pgbouncer did not listen on {port}:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return "(no pgbouncer log)"


@contextlib.contextmanager
def pgbouncer_in_front(
    server_url: str,
    *,
    pool_mode: str = "transaction",
    pool_size: int = 4,
    settings: dict[str, str] | None = None,
) -> Iterator[Bouncer]:
    """PgBouncer on 127.0.0.1 in front of the pg_cluster.py server of `server_url`."""
    ok, binary = pgbouncer_available()
    if not ok:
        raise RuntimeError(binary)
    directory, server_port = server_socket(server_url)
    database = urlsplit(server_url).path.lstrip("/")
    root = Path(tempfile.mkdtemp(prefix="cadence-pgb-")).resolve()
    if os.geteuid() == 0:
        owner = pwd.getpwnam(_RUN_AS)
        os.chown(root, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    options = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(port),
        "unix_socket_dir": str(root),
        "auth_type": "trust",
        "auth_file": str(root / "userlist.txt"),
        "pool_mode": pool_mode,
        "default_pool_size": str(pool_size),
        "max_client_conn": "200",
        "logfile": str(root / "pgbouncer.log"),
        "pidfile": "",
        # what docs/deploying-postgresql.md asks of a pooler in front of cadence-store
        "server_login_retry": "1",
        "query_wait_timeout": "10",
        **(settings or {}),
    }
    lines = [
        "[databases]",
        f"{database} = host={directory} port={server_port} dbname={database}",
        "[pgbouncer]",
        *(f"{key} = {value}" for key, value in options.items()),
    ]
    (root / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
    (root / "userlist.txt").write_text('"postgres" ""\n')
    process = subprocess.Popen(
        _as_owner([binary, str(root / "pgbouncer.ini")]),
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(process.pid), str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def stop() -> None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(Exception):
            assert watchdog.stdin is not None
            watchdog.stdin.close()
            watchdog.wait(timeout=10)

    atexit.register(stop)
    try:
        _wait_until_listening(port, process, root / "pgbouncer.log")
        yield Bouncer(
            url=f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}",
            port=port,
            root=root,
            process=process,
        )
    finally:
        stop()
        atexit.unregister(stop)
