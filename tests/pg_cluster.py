"""A throwaway PostgreSQL server for the test suite (standard library only).

``throwaway_cluster()`` runs ``initdb`` in a fresh temporary directory, starts
the server on a unix socket inside that directory (no TCP listener), creates the
database ``cadence_test`` and yields an SQLAlchemy URL for it.  On exit the
server is stopped (``pg_ctl -m immediate stop``) and the directory removed.

Three layers make sure no server outlives the test session:

1. the context manager's ``finally`` (normal exit, exceptions, KeyboardInterrupt
   inside the ``with`` block);
2. an ``atexit`` hook (the interpreter exits without unwinding the ``with``,
   e.g. pytest aborted by Ctrl-C between tests);
3. a tiny watchdog process that holds the read end of a pipe: when the test
   process dies in any way (even SIGKILL/SIGTERM, which skip ``atexit``) the
   pipe reaches EOF and the watchdog stops the server and removes the directory.
   This matters because ``pg_ctl`` detaches the postmaster with ``setsid()``,
   so it does not receive the terminal's Ctrl-C and is not in our process group.

PostgreSQL refuses to run as root, so when ``os.geteuid() == 0`` ``initdb`` and
``pg_ctl`` are run as the ``postgres`` user via ``runuser`` (or ``su``), and the
temporary directory is handed to that user.  Root connects through the socket
regardless of permissions; the socket itself is created world-accessible.

Environment variables:

* ``CADENCE_PG_BIN``: directory holding ``initdb``/``pg_ctl`` (overrides search).
* ``CADENCE_PG_FAST=1``: start with ``fsync=off`` (default keeps fsync on; the test
  session's cluster passes ``fsync=False`` itself, see tests/conftest.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

__all__ = ["find_pg_bin", "pg_available", "throwaway_cluster"]

DATABASE = "cadence_test"
SUPERUSER = "postgres"
_RUN_AS = "postgres"  # OS user that owns the cluster when we are root
_REQUIRED = ("initdb", "pg_ctl", "postgres", "createdb")
_SOCKET_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux
_START_TIMEOUT_S = 60
_COMMAND_TIMEOUT_S = 120  # any single initdb/pg_ctl/createdb call

# Runs as `python -c`; argv = [stop command..., root dir]. Blocks until the
# parent's end of the pipe closes (parent finished *or* died), then cleans up.
_WATCHDOG = """\
import os, shutil, subprocess, sys
*stop, root = sys.argv[1:]
try:
    sys.stdin.buffer.read()
except BaseException:
    pass
if os.path.exists(os.path.join(root, "data", "postmaster.pid")):
    subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
shutil.rmtree(root, ignore_errors=True)
"""


def _has_tools(bindir: Path) -> bool:
    return all(os.access(bindir / tool, os.X_OK) for tool in _REQUIRED)


def _version_key(bindir: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin -> numeric sort ("9.6" < "15" < "16")
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name))


def find_pg_bin() -> Path | None:
    """Directory with the PostgreSQL server binaries, or None.

    Order: ``$CADENCE_PG_BIN`` (exclusively, when set), the highest version
    under ``/usr/lib/postgresql/*/bin``, then ``initdb`` on ``PATH`` (symlinks
    resolved, so a ``/usr/local/bin/initdb`` link finds its sibling tools).
    """
    override = os.environ.get("CADENCE_PG_BIN")
    if override:
        path = Path(override)
        return path if _has_tools(path) else None
    candidates = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if _has_tools(p)]
    if candidates:
        return max(candidates, key=_version_key)
    initdb = shutil.which("initdb")
    if initdb:
        path = Path(initdb).resolve().parent
        if _has_tools(path):
            return path
    return None


def _run_as_prefix() -> list[str]:
    """Command prefix that drops root privileges to the cluster owner."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", _RUN_AS, "--"]
    su = shutil.which("su")
    if su:  # su takes one shell string; _as_owner() joins the rest into it
        return [su, "-s", "/bin/sh", _RUN_AS, "-c"]
    raise RuntimeError("running as root but neither runuser nor su is available")


def pg_available() -> tuple[bool, str]:
    """(True, description) if a throwaway cluster can be started, else (False, reason)."""
    bindir = find_pg_bin()
    if bindir is None:
        where = os.environ.get("CADENCE_PG_BIN") or "/usr/lib/postgresql/*/bin or PATH"
        return False, f"PostgreSQL server binaries ({', '.join(_REQUIRED)}) not found in {where}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_RUN_AS)
        except KeyError:
            return False, f"running as root but there is no {_RUN_AS!r} user to run PostgreSQL"
        if not (shutil.which("runuser") or shutil.which("su")):
            return False, "running as root but neither runuser nor su is available"
    return True, f"PostgreSQL binaries in {bindir}"


def _as_owner(cmd: Sequence[str]) -> list[str]:
    prefix = _run_as_prefix()
    if prefix and prefix[-1] == "-c":  # su: needs a single shell command string
        return [*prefix, shlex.join(cmd)]
    return [*prefix, *cmd]


def _clean_env() -> dict[str, str]:
    # PGHOST, PGPORT, PGDATA, PGOPTIONS... from the caller must not leak in.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _fsync_wanted(fsync: bool | None) -> bool:
    return os.environ.get("CADENCE_PG_FAST") != "1" if fsync is None else fsync


def _free_port() -> int:
    # Only names the socket file (no TCP listener), but keep it a free port
    # anyway so the URL never points at somebody else's server by accident.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _log_tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


def _run(cmd: Sequence[str], root: Path, what: str, log: Path | None = None) -> None:
    proc = subprocess.run(
        list(cmd),
        cwd=root,  # root's cwd (e.g. /root) may be unreadable for `postgres`
        env=_clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=_COMMAND_TIMEOUT_S,
    )
    if proc.returncode != 0:
        detail = proc.stdout.strip()
        if log is not None:
            detail += "\n--- server log (tail) ---\n" + _log_tail(log)
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{detail}")


class _Cleanup:
    """Idempotent stop-and-remove, shared by ``finally`` and ``atexit``."""

    def __init__(self, stop_cmd: list[str], root: Path, watchdog: subprocess.Popen[bytes]):
        self.stop_cmd = stop_cmd
        self.root = root
        self.watchdog = watchdog
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            if (self.root / "data" / "postmaster.pid").exists():
                subprocess.run(
                    self.stop_cmd,
                    cwd=self.root,
                    env=_clean_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                    timeout=_COMMAND_TIMEOUT_S,
                )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            with contextlib.suppress(Exception):
                if self.watchdog.stdin is not None:
                    self.watchdog.stdin.close()  # EOF: the watchdog finds nothing to do
                self.watchdog.wait(timeout=10)


@contextlib.contextmanager
def throwaway_cluster(*, fsync: bool | None = None) -> Iterator[str]:
    """Start a private PostgreSQL server; yield an SQLAlchemy URL to ``cadence_test``.

    ``fsync`` None: on unless ``CADENCE_PG_FAST=1``."""
    ok, reason = pg_available()
    if not ok:
        raise RuntimeError(reason)
    bindir = find_pg_bin()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="cadence-pg-")).resolve()
    data, log = root / "data", root / "server.log"
    port = _free_port()
    socket_file = root / f".s.PGSQL.{port}"
    stop_cmd = _as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, *stop_cmd, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives a signal sent to our process group
    )
    cleanup = _Cleanup(stop_cmd, root, watchdog)
    atexit.register(cleanup)
    try:
        if len(str(socket_file)) > _SOCKET_PATH_MAX:
            raise RuntimeError(
                f"unix socket path {socket_file} is longer than {_SOCKET_PATH_MAX} bytes; "
                "set TMPDIR to a shorter directory (e.g. /tmp)"
            )
        if os.geteuid() == 0:
            owner = pwd.getpwnam(_RUN_AS)
            os.chown(root, owner.pw_uid, owner.pw_gid)
            os.chmod(root, 0o755)  # the socket lives here; keep it reachable
            _run(
                _as_owner(["test", "-w", str(root)]),
                root,
                f"access check: user {_RUN_AS!r} cannot write {root} "
                "(is a parent directory private? try TMPDIR=/tmp)",
            )
        _run(
            _as_owner(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
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
            root,
            "initdb",
        )
        settings = {
            "listen_addresses": _conf_quote(""),
            "unix_socket_directories": _conf_quote(str(root)),
            "unix_socket_permissions": "0777",
            "port": str(port),
            "max_connections": "100",
            "fsync": "on" if _fsync_wanted(fsync) else "off",
        }
        with (data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# throwaway test cluster (tests/pg_cluster.py)\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        pg_ctl_start = [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-w",
            "-t",
            str(_START_TIMEOUT_S),
            "-s",
            "start",
        ]
        _run(_as_owner(pg_ctl_start), root, "pg_ctl start", log=log)
        createdb = [str(bindir / "createdb"), "-h", str(root), "-p", str(port)]
        _run([*createdb, "-U", SUPERUSER, DATABASE], root, "createdb", log=log)
        yield (
            f"postgresql+psycopg://{SUPERUSER}@/{DATABASE}"
            f"?host={quote(str(root), safe='/')}&port={port}"
        )
    finally:
        cleanup()
        atexit.unregister(cleanup)


if __name__ == "__main__":  # manual smoke test: python tests/pg_cluster.py
    print(pg_available())
    t0 = time.perf_counter()
    with throwaway_cluster() as url:
        t1 = time.perf_counter()
        print(url)
    t2 = time.perf_counter()
    print(f"start {t1 - t0:.2f}s, stop {t2 - t1:.2f}s")
