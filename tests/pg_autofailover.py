"""A throwaway pg_auto_failover formation: a monitor and two nodes (standard library).

``auto_failover_formation(fast=...)`` runs Debian's ``pg_autoctl`` (packages
``postgresql-15-auto-failover``, ``pg-auto-failover-cli``) as the ``postgres`` user when
we are root, as tests/pg_cluster.py runs PostgreSQL: every server listens on 127.0.0.1 on
a free port chosen now, keeps its unix socket in the formation's own temporary
directory (``PG_REGRESS_SOCK_DIR``), and pg_autoctl's configuration and state live there
too (``XDG_*``). It creates the monitor, the primary, then the standby (asking the
primary for a CHECKPOINT so that the standby's base backup does not wait for a spread
one), waits until the monitor reports ``primary`` and ``secondary``, and yields a
`Formation`. On exit a watchdog process (the same if we die) freezes every pg_autoctl
process group, stops every server (``pg_ctl -m immediate``), kills the groups and
removes the directory.

`fast=True` tightens the monitor's health checks (for the default suite); `fast=False`
keeps pg_auto_failover's defaults, whose promotion after a node crash takes about 50 s.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pg_cluster import _RUN_AS, _as_owner, _free_port, find_pg_bin

__all__ = ["Formation", "auto_failover_formation", "pg_autoctl_available"]

READY_TIMEOUT_S = 120
FORMATION_MONITOR_SETTINGS = {
    # seconds of a node not answering before the monitor acts, and how long it waits for
    # a primary it cannot reach to demote itself (defaults: 5 s, 20 s, 2, 2 s, 30 s)
    "pgautofailover.health_check_period": "'1s'",
    "pgautofailover.node_considered_unhealthy_timeout": "'2s'",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "'500ms'",
    "pgautofailover.primary_demote_timeout": "'3s'",
}

# argv = [root, pg_ctl, datadir...]; stdin: one process group id a line, as they start.
# On EOF (our parent ended or died): freeze the pg_autoctl processes (so that none starts
# a server again), stop every server while its postmaster lives, then kill the groups and
# remove root. A postmaster killed first (it is in pg_autoctl's group; its children each
# lead a session of their own) leaves the monitor's logger and health-check worker
# running, orphaned, for good.
_WATCHDOG = """\
import os, shutil, signal, subprocess, sys
root, pg_ctl, *datadirs = sys.argv[1:]
groups = []
try:
    for line in sys.stdin:
        groups.append(int(line))
except BaseException:
    pass
postmasters = set()
for datadir in datadirs:
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as pid_file:
            postmasters.add(int(pid_file.readline()))
    except (OSError, ValueError):
        pass
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) not in postmasters:
        try:
            if os.getpgid(int(entry)) in groups:
                os.kill(int(entry), signal.SIGSTOP)
        except OSError:
            pass
for datadir in datadirs:
    if os.path.exists(os.path.join(datadir, "postmaster.pid")):
        command = [pg_ctl, "-D", datadir, "-m", "immediate", "-w", "-t", "20", "stop"]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(root, ignore_errors=True)
"""


def pg_autoctl_available() -> tuple[bool, str]:
    binary = shutil.which("pg_autoctl")
    bindir = find_pg_bin()
    if binary is None or bindir is None:
        return (
            False,
            "pg_autoctl is not installed "
            "(Debian: postgresql-15-auto-failover, pg-auto-failover-cli)",
        )
    if not (bindir.parent / "lib" / "pgautofailover.so").exists() and not any(
        Path("/usr/lib/postgresql").glob("*/lib/pgautofailover.so")
    ):
        return False, "the pgautofailover extension is not installed"
    return True, binary


@dataclass
class Node:
    name: str
    port: int
    data: Path
    process: subprocess.Popen[bytes] | None = None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@dataclass
class Formation:
    root: Path
    monitor: Node
    nodes: list[Node]
    bindir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def autoctl(self, *args: str) -> str:
        return _autoctl(self.root, self.bindir, [*args, "--pgdata", str(self.monitor.data)])

    def show_uri(self) -> str:
        """The formation's URL, as `pg_autoctl show uri` prints it."""
        return self.autoctl("show", "uri", "--formation", "default").strip()

    def states(self) -> dict[str, str]:
        """Node name -> the state the node reported to the monitor."""
        rows = json.loads(self.autoctl("show", "state", "--json"))
        return {
            row["nodename"]: row.get("current_group_state", row.get("reported_state"))
            for row in rows
        }

    def primary(self) -> Node:
        states = self.states()
        for node in self.nodes:
            if states.get(node.name) in {"primary", "wait_primary", "single"}:
                return node
        raise AssertionError(f"no primary: {states}")

    def crash(self, node: Node) -> None:
        """SIGKILL the node's pg_autoctl and its server at once (a machine crash)."""
        assert node.process is not None
        postmaster = node.postmaster_pid()
        with contextlib.suppress(OSError):
            os.killpg(node.process.pid, signal.SIGKILL)
        if postmaster is not None:
            with contextlib.suppress(OSError):
                os.kill(postmaster, signal.SIGKILL)


def _environment(root: Path, bindir: Path) -> list[str]:
    return [
        "env",
        f"XDG_CONFIG_HOME={root / 'config'}",
        f"XDG_DATA_HOME={root / 'share'}",
        f"XDG_RUNTIME_DIR={root / 'run'}",
        f"PG_REGRESS_SOCK_DIR={root}",
        f"PGHOST={root}",
        f"PATH={bindir}:/usr/bin:/bin",
    ]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PG", "XDG_"))}


def _autoctl(root: Path, bindir: Path, args: list[str], timeout: float = 120) -> str:
    command = _as_owner([*_environment(root, bindir), "pg_autoctl", *args])
    result = subprocess.run(
        command,
        cwd=root,
        env=_clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pg_autoctl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def _spawn(root: Path, bindir: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _as_owner([*_environment(root, bindir), "pg_autoctl", *args]),
        cwd=root,
        env=_clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: one killpg stops it all
    )


def _wait(condition: object, what: str, formation: Formation | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        with contextlib.suppress(RuntimeError, json.JSONDecodeError):
            if condition():  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            detail = ""
            if formation is not None:
                for log in sorted(formation.root.glob("*.log")):
                    detail += f"\n--- {log.name} ---\n" + "\n".join(
                        log.read_text(errors="replace").splitlines()[-15:]
                    )
            raise RuntimeError(f"timed out waiting for {what}{detail}")
        time.sleep(0.2)


def _checkpoint(bindir: Path, port: int) -> None:
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run(
            [
                str(bindir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-qAtc",
                "CHECKPOINT",
            ],
            env=_clean_env(),
            capture_output=True,
            timeout=10,
            check=False,
        )


@contextlib.contextmanager
def auto_failover_formation(
    *, fast: bool = True, database: str = "cadence_test"
) -> Iterator[Formation]:
    ok, reason = pg_autoctl_available()
    if not ok:
        raise RuntimeError(reason)
    bindir = find_pg_bin()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="cadence-paf-", dir="/tmp")).resolve()
    if os.geteuid() == 0:
        owner = pwd.getpwnam(_RUN_AS)
        os.chown(root, owner.pw_uid, owner.pw_gid)
        os.chmod(root, 0o755)
    monitor = Node("monitor", _free_port(), root / "monitor")
    nodes = [Node(f"node{n}", _free_port(), root / f"node{n}") for n in (1, 2)]
    formation = Formation(root, monitor, nodes, bindir)
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(root), str(bindir / "pg_ctl")]
        + [str(node.data) for node in (monitor, *nodes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def guard(process: subprocess.Popen[bytes]) -> None:
        """`process` (a pg_autoctl service) is stopped even if we die."""
        formation.processes.append(process)
        assert watchdog.stdin is not None
        watchdog.stdin.write(f"{process.pid}\n".encode())
        watchdog.stdin.flush()

    def stop() -> None:
        # a throwaway formation: no graceful shutdown (pg_autoctl's takes seconds per node);
        # the watchdog stops the servers, then kills the pg_autoctl groups (its order)
        with contextlib.suppress(Exception):
            assert watchdog.stdin is not None
            watchdog.stdin.close()  # EOF: the watchdog stops everything, removes root
            watchdog.wait(timeout=90)
        for process in formation.processes:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)  # if the watchdog could not
        for process in formation.processes:
            process.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    try:
        _autoctl(
            root,
            bindir,
            [
                "create",
                "monitor",
                "--pgdata",
                str(monitor.data),
                "--pgport",
                str(monitor.port),
                "--hostname",
                "127.0.0.1",
                "--auth",
                "trust",
                "--no-ssl",
            ],
        )
        formation.autoctl("config", "set", "postgresql.listen_addresses", "127.0.0.1")
        if fast:
            with (monitor.data / "postgresql.conf").open("a") as conf:
                conf.write("\n# tests/pg_autofailover.py: fast failover\n")
                conf.writelines(f"{k} = {v}\n" for k, v in FORMATION_MONITOR_SETTINGS.items())
        monitor.process = _spawn(
            root, bindir, ["run", "--pgdata", str(monitor.data)], root / "monitor.log"
        )
        guard(monitor.process)
        monitor_url = (
            f"postgres://autoctl_node@127.0.0.1:{monitor.port}/pg_auto_failover?sslmode=disable"
        )
        _wait(lambda: formation.states() is not None, "the monitor", formation)
        for number, node in enumerate(nodes):
            node.process = _spawn(
                root,
                bindir,
                [
                    "create",
                    "postgres",
                    "--pgdata",
                    str(node.data),
                    "--pgport",
                    str(node.port),
                    "--hostname",
                    "127.0.0.1",
                    "--listen",
                    "127.0.0.1",
                    "--auth",
                    "trust",
                    "--no-ssl",
                    "--monitor",
                    monitor_url,
                    "--dbname",
                    database,
                    "--name",
                    node.name,
                    "--run",
                ],
                root / f"{node.name}.log",
            )
            guard(node.process)
            if number == 0:
                _wait(
                    lambda: (
                        formation.states().get("node1") in {"single", "wait_primary", "primary"}
                    ),
                    "the first node to serve",
                    formation,
                )

        def standby_ready() -> bool:
            states = formation.states()
            if states.get("node2") == "secondary" and states.get("node1") == "primary":
                return True
            _checkpoint(bindir, nodes[0].port)  # the base backup waits for one
            return False

        _wait(standby_ready, "the standby to become secondary", formation)
        yield formation
    finally:
        stop()
        atexit.unregister(stop)
