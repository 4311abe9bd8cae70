"""The process that test_crash.py kills with SIGKILL (issue 7 item 1).

Two ways to run it (``python crash_child.py ...``):

``run MODE URL RUN_ID GENERATION``
    Open a ``RunStore`` on URL and call it in a loop; after each call RETURNS, print one
    ``ack`` line (JSON) to stdout, flushed. Whatever an ``ack`` line names was
    acknowledged to the caller, so it must survive the kill. Loops until killed (or
    until ``MAX_SECONDS`` pass: a child that nobody kills ends by itself).

``serve``
    A fork server: import cadence-store once, then read JSON commands from stdin, one a
    line; ``{"mode", "url", "run_id", "generation"}`` forks a child that does what
    ``run`` does, and prints ``pid <pid>``; when that child dies the server reaps it
    (``waitpid``) and prints ``reaped <pid> <how>`` (``signal 9``, ``exit 0``). A fresh
    interpreter costs about a second of imports, a fork a few milliseconds, so the
    tests can kill many children per engine within their budget. EOF on stdin (the test
    is gone) ends the server. Each forked child asks the kernel to SIGKILL it should the
    server die first.

MODE is ``append`` (transitions paused -> paused of RUN_ID), ``start`` (start_run of a
new change each time; RUN_ID is ignored) or ``lease`` (acquire, renew, an append with the
lease, commit; on RUN_ID). Operation ids carry GENERATION, so that each child's are new.
Lines: ``open`` once the store is open, ``call NAME`` just before each call,
``ack {json}`` once it returned, ``error {json}`` if a call raised (the child then exits
3: the test fails on it). A kill after a ``call`` line and before its ``ack`` hit the
call in flight (its transaction may or may not have committed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from typing import Any

ROOT_HASH = "ab" * 32
LEASE_TTL_MS = 600_000  # longer than any test: a lease acked before a kill stays live
MAX_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def emit(line: str) -> None:
    """One whole line in one write(2) (< PIPE_BUF: atomic on a pipe), nothing buffered."""
    os.write(1, (line + "\n").encode())


def ack(**fields: Any) -> None:
    emit("ack " + json.dumps({**fields, "t": time.monotonic()}, sort_keys=True))


def work(mode: str, url: str, run_id: str, generation: str) -> None:
    from cadence_store import RunStore

    deadline = time.monotonic() + MAX_SECONDS
    with RunStore(url, root_hash=ROOT_HASH) as store:
        emit("open")
        n = 0
        while time.monotonic() < deadline:
            if mode == "append":
                operation_id = f"{generation}-a{n}"
                emit("call append")
                projection = store.transition(
                    run_id, "paused", operation_id=operation_id, code=operation_id
                )
                ack(
                    kind="append",
                    op=operation_id,
                    seq=projection.sequence,
                    hash=projection.event_hash,
                )
            elif mode == "start":
                operation_id = f"{generation}-s{n}"
                change = f"crash-{generation}-{n}"
                emit("call start")
                projection = store.start_run(
                    "abel-implement", change=change, operation_id=operation_id
                )
                ack(
                    kind="start",
                    op=operation_id,
                    change=change,
                    run_id=projection.run_id,
                    hash=projection.event_hash,
                )
            elif mode == "lease":
                operation_id = f"{generation}-l{n}"
                emit("call acquire")
                lease = store.acquire_lease(run_id, operation_id, LEASE_TTL_MS)
                ack(kind="acquire", op=operation_id, lease=lease.model_dump(mode="json"))
                emit("call renew")
                lease = store.renew_lease(lease, LEASE_TTL_MS)
                ack(kind="renew", op=operation_id, lease=lease.model_dump(mode="json"))
                step = f"{operation_id}-t"
                emit("call append")
                projection = store.transition(
                    run_id, "paused", operation_id=step, code=step, lease=lease
                )
                ack(
                    kind="append",
                    op=step,
                    lease_op=operation_id,
                    seq=projection.sequence,
                    hash=projection.event_hash,
                )
                emit("call commit")
                outcome = store.commit_lease(
                    lease, {"generation": generation, "n": n, "token": lease.token}
                )
                ack(kind="commit", op=operation_id, outcome=outcome)
            else:
                raise ValueError(f"unknown mode {mode!r}")
            n += 1


def run_guarded(mode: str, url: str, run_id: str, generation: str) -> int:
    try:
        work(mode, url, run_id, generation)
    except BaseException as error:
        emit(
            "error "
            + json.dumps(
                {
                    "type": type(error).__name__,
                    "code": getattr(error, "code", None),
                    "traceback": traceback.format_exc(),
                }
            )
        )
        return 3
    return 0


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the fork server) dies (Linux prctl)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # best effort: the child also stops after MAX_SECONDS


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def serve() -> int:
    import cadence_store
    import cadence_store.store.run_store  # noqa: F401

    server = os.getpid()
    emit("ready")
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("exit"):
            break
        pid = os.fork()
        if pid == 0:  # the child: no engine, connection or thread came with the fork
            code = 3
            try:
                _die_with_parent()
                if os.getppid() != server:  # the server died before prctl took effect
                    os._exit(4)
                code = run_guarded(
                    command["mode"], command["url"], command["run_id"], command["generation"]
                )
            finally:
                os._exit(code)
        emit(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        emit(f"reaped {pid} {_how(status)}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve()
    if argv[:1] == ["run"] and len(argv) == 5:
        return run_guarded(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
