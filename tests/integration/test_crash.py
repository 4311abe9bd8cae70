"""Crash safety: SIGKILL a writer at random moments, then check what it acknowledged
(issue 7 item 1).

A child (``crash_child.py``) calls the store in a loop and prints an ``ack`` line for
each call only AFTER the call returned. The test reads some lines, waits a random
moment, ``os.kill(pid, SIGKILL)``s the child, makes sure it was reaped (killed by
signal 9), and checks, on a SQLite file (WAL, synchronous=FULL, as cadence-store sets
them) and on PostgreSQL:

- every acknowledged operation is committed: its receipt exists and replaying its
  operation id returns the recorded outcome (same sequence and hash, same run, same
  lease outcome), and the run's sequence is at least the last acknowledged one;
- at most the one call in flight at the kill committed without an ack, and nothing
  half-done exists (one receipt per event, one event per started run);
- the chain has no gap or fork (sequences 1..N, each prior hash the previous hash),
  ``verify_integrity`` passes, and the stored projection equals ``rebuild_projection``.

Three workloads: appends (transitions), ``start_run``, and leases (acquire, renew, an
append with the lease, commit). The kill schedule comes from
``random.Random(20261129)``: after a random number of acknowledged lines (sometimes
before the store is even open), a random delay of up to a few calls, then the kill.

Children come from a fork server (``crash_child.py serve``: cadence-store imported once,
then one ``fork`` per child, each child opening its own store), so that 30 kills per
engine and workload fit the budget; a smaller campaign starts a fresh interpreter per
kill and kills it directly. ``--slow`` runs long campaigns of both kinds.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

import cadence_store
from cadence_store import RunStore
from cadence_store.storage.models import events, operations, runs

pytestmark = pytest.mark.campaign  # kill -9 loops: the campaign step (docs/development.md)

CHILD = Path(__file__).resolve().with_name("crash_child.py")
ROOT_HASH = "ab" * 32
SEED = 20261129
KILLS = 30  # per engine and workload, fork server
FRESH_KILLS = 5  # per engine, fresh interpreter per kill
SLOW_KILLS = {"fork": 100, "fresh": 25}
MAX_ACKS_BEFORE_KILL = 12
MAX_DELAY_S = 0.008  # a few calls' worth
EARLY_KILL_RATE = 0.1  # kill before the child has even opened its store
LINE_TIMEOUT_S = 60  # no line for that long: the child is hung (a bug)
SETTLE_TIMEOUT_S = 30
CHILD_APP = "crash-child"

WORKLOADS = ("append", "start", "lease")


# -- reading a child's stdout ------------------------------------------------------------


class Lines:
    """The lines of a pipe, read by a daemon thread so that reads can time out."""

    def __init__(self, stream: Any) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        for raw in stream:
            self._queue.put(raw.decode().rstrip("\n"))
        self._queue.put(None)

    def get(self, timeout: float = LINE_TIMEOUT_S) -> str | None:
        """The next line; None at end of stream."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from the child for {timeout} s (hung?)") from None


class Child:
    """One writer process: its pid, its lines, and how to SIGKILL and reap it."""

    pid: int

    def next_line(self) -> str | None:
        raise NotImplementedError

    def kill_and_reap(self) -> list[str]:
        """SIGKILL the child, make sure it was reaped as killed by signal 9, and return
        the lines it printed that were not read yet (acknowledged all the same)."""
        raise NotImplementedError

    def abandon(self) -> None:
        """After a failed check: make sure the child is dead and reaped, quietly."""
        try:
            self.kill_and_reap()
        except (AssertionError, OSError, subprocess.SubprocessError):
            pass


class ForkedChild(Child):
    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.reaped = False

    def next_line(self) -> str | None:
        line = self.server.lines.get()
        if line is not None and line.startswith("reaped "):
            self.reaped = self.server.broken = True
            raise AssertionError(f"the child ended before it was killed: {line}")
        return line

    def abandon(self) -> None:
        self.server.broken = True  # its output may be out of step now: the next test
        if not self.reaped:  # gets a new server (this one is closed at module teardown)
            super().abandon()

    def kill_and_reap(self) -> list[str]:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended by itself: the reaped line below says how
        rest = []
        while True:
            line = self.server.lines.get()
            if line is None:
                self.server.broken = True
                raise AssertionError("the fork server ended")
            if line.startswith("reaped "):
                break
            rest.append(line)
        # the server waitpid()ed it: gone, and killed by our signal
        assert line == f"reaped {self.pid} signal {signal.SIGKILL.value}", (line, rest)
        return rest


class ForkServer:
    """``crash_child.py serve``: imports cadence-store once, forks one child per kill."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.lines = Lines(self.process.stdout)
        self.broken = False
        assert self.lines.get() == "ready"

    def start(self, mode: str, url: str, run_id: str, generation: str) -> ForkedChild:
        assert not self.broken and self.process.stdin is not None
        command = {"mode": mode, "url": url, "run_id": run_id, "generation": generation}
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()
        line = self.lines.get()
        assert line is not None and line.startswith("pid "), line
        return ForkedChild(self, int(line.split()[1]))

    def close(self) -> None:
        self.broken = True
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(b'{"exit": true}\n')
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(timeout=30)


class FreshChild(Child):
    """``crash_child.py run ...`` in a fresh interpreter, our own direct child."""

    def __init__(self, mode: str, url: str, run_id: str, generation: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), "run", mode, url, run_id, generation],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        self.pid = self.process.pid
        self.lines = Lines(self.process.stdout)

    def next_line(self) -> str | None:
        line = self.lines.get()
        if line is None:
            raise AssertionError(f"the child ended before it was killed: {self.process.wait()}")
        return line

    def kill_and_reap(self) -> list[str]:
        os.kill(self.pid, signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL  # reaped, by our signal
        rest = []
        while (line := self.lines.get()) is not None:
            rest.append(line)
        return rest


class FreshLauncher:
    def start(self, mode: str, url: str, run_id: str, generation: str) -> FreshChild:
        return FreshChild(mode, url, run_id, generation)


@pytest.fixture(scope="module")
def _servers() -> Iterator[list[ForkServer]]:
    holder: list[ForkServer] = []
    yield holder
    for server in holder:
        server.close()


@pytest.fixture
def fork_server(_servers: list[ForkServer]) -> ForkServer:
    """The module's fork server (a new one after a test broke the last)."""
    if not _servers or _servers[-1].broken:
        _servers.append(ForkServer())
    return _servers[-1]


# -- checks --------------------------------------------------------------------------------


def assert_chain(store: RunStore, run_id: str) -> int:
    """No gap, no fork; the chain verifies; the stored projection is the rebuilt one."""
    chain = store.list_events(run_id)
    assert [event.sequence for event in chain] == list(range(1, len(chain) + 1))
    prior = "0" * 64
    for event in chain:
        assert event.prior_hash == prior, f"fork or gap at sequence {event.sequence}"
        prior = event.hash
    verified = store.verify_integrity(run_id)
    stored = store.status(run_id)
    assert stored == store.rebuild_projection(run_id) == verified
    assert (stored.sequence, stored.event_hash) == (len(chain), prior)
    return len(chain)


def receipts(db: Engine, run_id: str | None, kind: str) -> dict[str, tuple[str, str | None]]:
    """operation_id -> (state, outcome_json) of the receipts of one kind."""
    query = select(operations.c.operation_id, operations.c.state, operations.c.outcome_json)
    query = query.where(operations.c.kind == kind)
    if run_id is not None:
        query = query.where(operations.c.run_id == run_id)
    with db.connect() as connection:
        return {row[0]: (row[1], row[2]) for row in connection.execute(query)}


def unacked_extra(committed: set[str], acked: list[str], generation: str, next_id: str) -> int:
    """Of one child's operations, only the one in flight at the kill may have committed
    without an ack; returns how many did (0 or 1)."""
    mine = {op for op in committed if op.startswith(f"{generation}-")}
    assert set(acked) <= mine
    extra = mine - set(acked)
    assert extra <= {next_id}, (generation, sorted(extra), next_id)
    return len(extra)


class AppendCheck:
    """append: transitions paused -> paused of one run."""

    def __init__(self, store: RunStore, db: Engine) -> None:
        self.store, self.db = store, db
        run = store.start_run("abel-implement", change="crash-appends", operation_id="start")
        self.run_id = run.run_id
        self.base = store.transition(self.run_id, "paused", operation_id="t0").sequence
        self.last_acked = self.base
        self.acked = 0
        self.unacked_committed = 0  # calls in flight at the kill that committed

    def after(self, generation: str, acks: list[dict[str, Any]]) -> None:
        assert all(a["kind"] == "append" for a in acks)
        sequences = [a["seq"] for a in acks]
        assert sequences == sorted(set(sequences))
        length = assert_chain(self.store, self.run_id)
        if acks:
            self.last_acked = acks[-1]["seq"]
        assert length >= self.last_acked
        committed = receipts(self.db, self.run_id, "state-transitioned")
        assert len(committed) == length - 1  # one receipt per appended event (t0 included)
        chain = self.store.list_events(self.run_id)
        for a in acks:
            assert committed[a["op"]][0] == "committed"
            event = chain[a["seq"] - 1]
            assert (event.hash, event.payload.get("code")) == (a["hash"], a["op"])
            replay = self.store.transition(
                self.run_id, "paused", operation_id=a["op"], code=a["op"]
            )
            assert (replay.sequence, replay.event_hash) == (a["seq"], a["hash"])
        self.unacked_committed += unacked_extra(
            set(committed), [a["op"] for a in acks], generation, f"{generation}-a{len(acks)}"
        )
        assert assert_chain(self.store, self.run_id) == length  # replays appended nothing
        self.acked += len(acks)


class StartCheck:
    """start: start_run of a new change per call."""

    def __init__(self, store: RunStore, db: Engine) -> None:
        self.store, self.db = store, db
        self.run_id = "00000000-0000-4000-8000-000000000000"  # unused by the child
        self.acked = 0
        self.unacked_committed = 0  # calls in flight at the kill that committed

    def after(self, generation: str, acks: list[dict[str, Any]]) -> None:
        assert all(a["kind"] == "start" for a in acks)
        for a in acks:
            projection = self.store.status(a["run_id"])
            assert (projection.change, projection.sequence, projection.event_hash) == (
                a["change"],
                1,
                a["hash"],
            )
            replay = self.store.start_run(
                "abel-implement", change=a["change"], operation_id=a["op"]
            )
            assert replay == projection
            assert assert_chain(self.store, a["run_id"]) == 1
        committed = receipts(self.db, None, "start")
        with self.db.connect() as connection:
            run_count = connection.execute(select(func.count()).select_from(runs)).scalar_one()
            per_run = dict(
                connection.execute(
                    select(events.c.run_id, func.count()).group_by(events.c.run_id)
                ).all()
            )
        # nothing half-done: each run has its one event and its one receipt
        assert run_count == len(committed) == len(per_run)
        assert set(per_run.values()) <= {1}
        self.unacked_committed += unacked_extra(
            set(committed), [a["op"] for a in acks], generation, f"{generation}-s{len(acks)}"
        )
        self.acked += len(acks)


class LeaseCheck:
    """lease: acquire, renew, an append with the lease, commit — per operation."""

    def __init__(self, store: RunStore, db: Engine) -> None:
        self.store, self.db = store, db
        run = store.start_run("abel-implement", change="crash-leases", operation_id="start")
        self.run_id = run.run_id
        self.base = store.transition(self.run_id, "paused", operation_id="t0").sequence
        self.acked = 0
        self.unacked_committed = 0  # calls in flight at the kill that committed
        self.commits = 0
        self.recovered = 0

    def after(self, generation: str, acks: list[dict[str, Any]]) -> None:
        by_op: dict[str, list[dict[str, Any]]] = {}
        for a in acks:
            by_op.setdefault(a.get("lease_op", a["op"]), []).append(a)
        for op, steps in by_op.items():
            kinds = [s["kind"] for s in steps]
            assert kinds == ["acquire", "renew", "append", "commit"][: len(kinds)], kinds
            status = self.store.inspect_operation(self.run_id, op)
            assert status is not None, op
            lease = steps[min(len(steps), 2) - 1]["lease"]  # the renewed one, if acked
            if kinds[-1] == "commit":
                assert (status.state, status.outcome) == ("committed", steps[-1]["outcome"])
                self.commits += 1
            elif status.state == "committed":  # the commit was in flight at the kill
                self.unacked_committed += 1
                expected = {"generation": generation, "n": int(op.rsplit("l", 1)[1])}
                assert status.outcome == {**expected, "token": lease["token"]}
            else:
                # the acknowledged lease survived the crash: still live, still ours
                assert status.state == "running", status
                assert status.expires_at >= lease["expires_at"]
                if "renew" in kinds:
                    assert status.expires_at == lease["expires_at"]
                outcome = self.store.commit_lease(lease, {"recovered": op})
                assert outcome == {"recovered": op}
                self.recovered += 1
            for step in steps:
                if step["kind"] == "append":
                    replay = self.store.transition(
                        self.run_id, "paused", operation_id=step["op"], code=step["op"]
                    )
                    assert (replay.sequence, replay.event_hash) == (step["seq"], step["hash"])
        length = assert_chain(self.store, self.run_id)
        appended = receipts(self.db, self.run_id, "state-transitioned")
        assert len(appended) == length - 1
        appends = [a for a in acks if a["kind"] == "append"]
        if appends:
            assert length >= appends[-1]["seq"]
        leases = receipts(self.db, self.run_id, "lease")
        for op in by_op:
            assert op in leases
        self.acked += len(acks)


CHECKS = {"append": AppendCheck, "start": StartCheck, "lease": LeaseCheck}


def child_url(url: str, generation: str) -> str:
    """On PostgreSQL the child's sessions carry an application_name, so that the test
    can tell when the server has finished with them."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    named = parsed.update_query_dict({"application_name": f"{CHILD_APP}-{generation}"})
    return named.render_as_string(hide_password=False)


def child_sessions(db: Engine, generation: str = "%") -> int:
    """How many server sessions of the child(ren) are there (PostgreSQL)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE :name"
    )
    with db.connect() as connection:
        return int(connection.execute(query, {"name": f"{CHILD_APP}-{generation}"}).scalar_one())


def settle(db: Engine) -> float:
    """Wait until the server has finished every session of the killed child.

    SIGKILL ends the client, not its server session: a COMMIT the child sent just before
    it died is still carried out after the child is gone (so an unacknowledged call may
    commit late; an acknowledged one has committed already). The checks must see the
    store after that, not race it. SQLite has no server: nothing outlives the process.
    """
    if db.dialect.name != "postgresql":
        return 0.0
    started = time.monotonic()
    while child_sessions(db) > 0:
        assert time.monotonic() - started < SETTLE_TIMEOUT_S, "the killed child's session lingers"
        time.sleep(0.002)  # polling for a condition, not a timing assertion
    return time.monotonic() - started


def campaign(
    launcher: Any, mode: str, url: str, kills: int, early_rate: float = EARLY_KILL_RATE
) -> dict[str, Any]:
    """Start, kill and reap `kills` children, checking the store after each kill."""
    cadence_store.upgrade(url)
    rng = random.Random(SEED)
    db = create_engine(url, pool_size=1, max_overflow=1)
    try:
        if url.startswith("sqlite"):
            with db.connect() as connection:
                assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        with RunStore(url, root_hash=ROOT_HASH) as store:
            check = CHECKS[mode](store, db)
            started = time.monotonic()
            early = 0
            busy = calls = settled = 0.0
            seen_session = False
            in_flight = 0
            for kill in range(kills):
                generation = f"g{kill}"
                child = launcher.start(mode, child_url(url, generation), check.run_id, generation)
                lines: list[str] = []
                try:
                    if rng.random() < early_rate:
                        early += 1  # while it starts up and opens its store
                    else:
                        line = child.next_line()
                        assert line == "open", line
                        lines.append(line)
                        if db.dialect.name == "postgresql" and not seen_session:
                            # the open store's pooled session is there, named: settle() works
                            assert child_sessions(db, generation) >= 1
                            seen_session = True
                        target = rng.randint(0, MAX_ACKS_BEFORE_KILL)
                        while sum(line.startswith("ack ") for line in lines) < target:
                            line = child.next_line()
                            assert line is not None
                            assert not line.startswith("error "), f"the child's call failed: {line}"
                            lines.append(line)
                    time.sleep(rng.uniform(0, MAX_DELAY_S))
                except BaseException:
                    child.abandon()
                    raise
                lines += child.kill_and_reap()
                settled = max(settled, settle(db))
                if lines and lines[-1].startswith("call "):
                    in_flight += 1  # the kill hit a call between its start and its ack
                errors = [line for line in lines if line.startswith("error ")]
                assert not errors, errors
                acks = [json.loads(line[4:]) for line in lines if line.startswith("ack ")]
                if len(acks) > 1:  # the child's own pace, between its first and last ack
                    busy += acks[-1]["t"] - acks[0]["t"]
                    calls += len(acks) - 1
                check.after(generation, acks)
            elapsed = time.monotonic() - started
        return {
            "kills": kills,
            "early_kills": early,
            "in_flight_kills": in_flight,
            "acked": check.acked,
            "unacked_committed": check.unacked_committed,
            "seconds": round(elapsed, 2),
            "acked_calls_per_s": round(calls / busy) if busy else None,
            "longest_settle_ms": round(settled * 1000, 1),
            **({"recovered_leases": check.recovered} if isinstance(check, LeaseCheck) else {}),
        }
    finally:
        db.dispose()


def report(mode: str, launcher: str, url: str, result: dict[str, Any]) -> None:
    engine = url.split(":", 1)[0]
    print(f"crash {mode}/{launcher}/{engine}: {result}")


# -- the tests -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", WORKLOADS)
def test_killed_writer_loses_no_acknowledged_call(fork_server, database_url, mode) -> None:
    result = campaign(fork_server, mode, database_url, KILLS)
    report(mode, "fork", database_url, result)
    assert result["acked"] > 0


def test_killed_fresh_interpreter_loses_no_acknowledged_append(database_url) -> None:
    # every kill after the store is open: a fresh interpreter's start-up is long
    result = campaign(FreshLauncher(), "append", database_url, FRESH_KILLS, early_rate=0.0)
    report("append", "fresh", database_url, result)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fork", "fresh"])
@pytest.mark.parametrize("mode", WORKLOADS)
def test_long_kill_campaign(fork_server, database_url, mode, launcher) -> None:
    chosen = fork_server if launcher == "fork" else FreshLauncher()
    result = campaign(chosen, mode, database_url, SLOW_KILLS[launcher])
    report(mode, launcher, database_url, result)
    assert result["acked"] > 0
