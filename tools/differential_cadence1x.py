"""A differential run: the same random journal calls on cadence 1.x's real `RunStore` and on
cadence-store's, compared call by call, table by table, and each store's verification run
on the other's data.

    python tools/differential_cadence1x.py [--steps 20000] [--seed 1] [--episode 250]
        [--check-every 100] [--out benchmarks/differential-results.json]

cadence 1.x runs in Node 24 (`tools/cadence1x_differential_worker.mjs`, JSON lines over
stdin/stdout), found as `benchmarks/verify_cadence1x.py` finds it (`CADENCE_1X_NODE`,
`CADENCE_1X_SRC`). Each episode opens a fresh pair of stores under one consumer root (so
one root hash) with one fake clock, and makes up to `--episode` calls (`differential_calls`,
seeded by `--seed` and the episode number). cadence-store answers first; the run ids and
lease tokens it made are handed to cadence 1.x's `randomUUID` for the same call, so the
two journals hash the same payloads and their rows can be compared byte for byte.

After each call the outcomes are compared (a projection's JSON byte for byte, other values
as JSON, error codes, how often the host's `write` ran). Every `--check-every` calls, and
at an episode's end, the four owned tables are compared row by row on cadence 1.x's
columns; cadence-store adopts a copy of the 1.x file (`cadence_store.upgrade`) and verifies
every run in it; cadence 1.x verifies a copy of cadence-store's rows (`Cadence1x`). A
difference is classed as one of the README's "Differences from cadence 1.x" when it is
exactly that case, else as undocumented; an episode whose tables diverged ends there.
Prints a table; writes the JSON (every undocumented difference with the calls before it).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from differential_calls import Call, Chooser, Knowledge  # noqa: E402
from differential_findings import (  # noqa: E402
    Difference,
    Tally,
    classify,
    classify_verification,
    report,
)
from differential_sides import (  # noqa: E402
    HostRefused,
    Outcome,
    Worker,
    call_cadence_store,
    js_outcome,
    normal,
    python_outcome,
    short,
    sqlite_copy,
    table_differences,
    table_rows,
)

from benchmarks.verify_cadence1x import TABLES, Cadence1x, locate  # noqa: E402
from cadence_store import (  # noqa: E402
    CadenceStoreError,
    RunStore,
    resolve_state_root,
    upgrade,
)

LOG_KEPT = 30  # calls before an undocumented difference kept in the JSON


class Episode:
    """One pair of fresh stores and the calls made on both."""

    def __init__(
        self, node: str, source: Path, directory: Path, seed: int, number: int, tally: Tally
    ) -> None:
        self.node, self.source, self.directory = node, source, directory
        self.seed, self.number, self.tally = seed, number, tally
        self.known = Knowledge()
        consumer = directory / "consumer"
        consumer.mkdir(parents=True)
        self.worker = Worker(node, source)
        opened = self.worker.ask(
            {
                "open": {"consumerRoot": str(consumer), "stateBase": str(directory / "state-1x")},
                "now": self.known.now,
            }
        )["ok"]
        self.js_path, self.root_hash = opened["databasePath"], opened["rootHash"]
        root = resolve_state_root(consumer, xdg_state_home=str(directory / "state-cs"))
        self.store = RunStore.open(root, clock=lambda: self.known.now)
        assert self.store.root_hash == self.root_hash
        self.py_path = root.database_path
        with sqlite3.connect(self.js_path) as connection:
            self.columns = {
                t: [row[1] for row in connection.execute(f"PRAGMA table_info({t})")] for t in TABLES
            }
        connection.close()
        self.chooser = Chooser(seed * 1_000_003 + number, self.known)
        self.log: list[dict[str, Any]] = []
        self.answered: list[tuple[Call, Outcome]] = []  # every call, with cadence 1.x's answer
        self.trace: list[tuple[Call, Outcome, Outcome]] | None = None  # kept when replaying

    def close(self) -> None:
        self.store.close()
        self.worker.close()

    # -- one call --------------------------------------------------------------------------

    def step(self, index: int) -> bool:
        """Make one call on both stores; False when the stores diverged."""
        call = self.chooser.next()
        self.log.append(
            {"call": call.name, "args": call.args, "write": call.write, "now": self.known.now}
        )
        self.tally.steps += 1
        if call.name == "clock":
            self.known.now = call.args[0]
            self.tally.calls["clock"] += 1
            return True
        context = self._context(call)
        writes_py = [0]
        try:
            value = call_cadence_store(self.store, call, writes_py)
            py = python_outcome(value)
        except CadenceStoreError as error:
            value, py = None, ("error", error.code)
        except HostRefused as error:
            value, py = None, ("error", str(error))
        except Exception as error:  # anything else is a finding, never a crash of the run
            value, py = None, ("error", f"raw {type(error).__name__}: {error}")
        ids = self.known.learn(call, value)
        answer = self.worker.ask(
            {
                "call": call.name,
                "args": call.args,
                "now": self.known.now,
                "ids": ids,
                "write": call.write,
            }
        )
        js = js_outcome(call.name, answer)
        self.answered.append((call, js))
        if self.trace is not None:
            self.trace.append((call, py, js))
        context.update(
            writes_py=writes_py[0],
            writes_js=answer["writes"],
            sequence_after=self._sequence(call.run_id),
        )
        self.tally.calls[call.kind] += 1
        self.tally.outcomes[f"{call.name} -> {'ok' if py[0] == 'ok' else py[1][:50]}"] += 1
        same_writes = call.write is None or writes_py[0] == answer["writes"]
        if py == js and same_writes and answer["drawn"] <= len(ids):
            return True
        label = classify(call, py, js, context)
        self.tally.differences.append(
            Difference(
                label,
                call.kind,
                self.seed,
                self.number,
                index,
                {
                    "call": call.name,
                    "args": short(call.args),
                    "write": call.write,
                    "tags": list(call.tags),
                    "cadence_store": (py[0], short(py[1], 2000)),
                    "cadence_1x": (js[0], short(js[1], 2000)),
                    "writes": {"cadence_store": writes_py[0], "cadence_1x": answer["writes"]},
                    "writes_differ": not same_writes,
                    "ids_handed_out": ids,
                    "ids_drawn_by_1x": answer["drawn"],
                    "now": self.known.now,
                    "calls_before": short(self.log[-1 - LOG_KEPT : -1], 200)
                    if label == "undocumented"
                    else len(self.log) - 1,
                },
            )
        )
        return not self.compare_tables(index, after_difference=True)

    def _context(self, call: Call) -> dict[str, Any]:
        context: dict[str, Any] = {"now": self.known.now, "operation_kind_before": None}
        context["sequence_before"] = self._sequence(call.run_id)
        run_id, operation_id = (
            call.args[0].get("runId") if call.name == "acquireLease" else None,
            None,
        )
        if run_id is not None:
            operation_id = call.args[0].get("operationId")
        if (
            isinstance(run_id, str)
            and isinstance(operation_id, str)
            and (run_id + operation_id).isascii()
        ):
            context["operation_kind_before"] = self._stored(
                "SELECT kind FROM operations WHERE run_id = ? AND operation_id = ?",
                run_id,
                operation_id,
            )
        return context

    def _sequence(self, run_id: str | None) -> int | None:
        """The run's stored sequence in cadence-store's file (None: no such run)."""
        if not isinstance(run_id, str) or not run_id.isascii():
            return None
        sequence: int | None = self._stored("SELECT sequence FROM runs WHERE run_id = ?", run_id)
        return sequence

    def _stored(self, query: str, *parameters: str) -> Any:
        """One value of cadence-store's file (None: no row)."""
        with sqlite3.connect(self.py_path, timeout=30) as connection:
            row = connection.execute(query, parameters).fetchone()
        connection.close()
        return None if row is None else row[0]

    # -- the checks ------------------------------------------------------------------------

    def compare_tables(self, index: int, *, after_difference: bool = False) -> bool:
        """True when the owned tables differ (a difference unless a call already explained it)."""
        self.tally.checks["table comparisons"] += 1
        found = table_differences(
            table_rows(self.py_path, self.columns), table_rows(self.js_path, self.columns)
        )
        if found and not after_difference:
            self.tally.differences.append(
                Difference(
                    "undocumented",
                    "tables",
                    self.seed,
                    self.number,
                    index,
                    {"what": "; ".join(found)},
                )
            )
        return bool(found)

    def cross_verify(self, index: int) -> None:
        """cadence-store adopts and verifies a copy of the 1.x file; 1.x verifies a copy of
        cadence-store's rows. One difference per run that fails."""
        work = self.directory / f"check-{index}"
        self._cadence_store_verifies_1x(index, work)
        self._1x_verifies_cadence_store(index, work)
        self.tally.checks["cross verifications"] += 1
        shutil.rmtree(work, ignore_errors=True)

    def _cadence_store_verifies_1x(self, index: int, work: Path) -> None:
        adopted = work / "adopted.sqlite3"
        sqlite_copy(self.js_path, adopted)
        url, what = f"sqlite:///{adopted}", "cadence-store verifying the adopted 1.x file"
        try:
            upgrade(url)
        except CadenceStoreError as error:
            self._verification_difference(index, f"{what}: upgrade {error.code}", str(error))
            return
        rows = table_rows(str(adopted), self.columns)
        if table_differences(rows, table_rows(self.js_path, self.columns)):
            self._verification_difference(index, f"{what}: adoption changed rows", "")
        with RunStore(url, root_hash=self.root_hash, clock=lambda: self.known.now) as adopted_store:
            for run_id in adopted_store.run_ids():
                self.tally.checks["runs verified by cadence-store in the adopted 1.x file"] += 1
                try:
                    verified = adopted_store.verify_integrity(run_id).to_json()
                    events = [event.to_dict() for event in adopted_store.list_events(run_id)]
                except CadenceStoreError as error:
                    self._verification_difference(
                        index,
                        f"{what}: {error.code}",
                        str(error),
                        classify_verification(str(error), run_id, self.answered),
                    )
                    continue
                status = self.worker.ask({"call": "status", "args": [run_id]})
                if verified != status.get("json"):
                    self._verification_difference(index, f"{what}: projection", run_id)
                listed = self.worker.ask({"call": "listEvents", "args": [run_id]})
                if normal(events) != normal(json.loads(listed["json"])):
                    self._verification_difference(index, f"{what}: events", run_id)

    def _1x_verifies_cadence_store(self, index: int, work: Path) -> None:
        reference = Cadence1x(self.node, self.source, work / "1x")
        what = "cadence 1.x verifying cadence-store's rows"
        try:
            reference.copy_from(f"sqlite:///{self.py_path}")
            for run_id in self.store.run_ids():
                self.tally.checks["runs verified by cadence 1.x in cadence-store's rows"] += 1
                try:
                    reference.verify(run_id)
                except RuntimeError as error:
                    reason = str(error).splitlines()[0].removeprefix("cadence 1.x worker: ")
                    self._verification_difference(index, f"{what}: {reason[:80]}", run_id)
        finally:
            reference.close()

    def _verification_difference(
        self, index: int, what: str, problem: str, label: str = "undocumented"
    ) -> None:
        self.tally.differences.append(
            Difference(
                label,
                "verification",
                self.seed,
                self.number,
                index,
                {
                    "what": what,
                    "problem": problem[:1000],
                    "calls_before": short(self.log[-LOG_KEPT:], 200)
                    if label == "undocumented"
                    else len(self.log),
                },
            )
        )

    def opens_the_other_file(self) -> str:
        """Whether cadence 1.x's `RunStore.open` takes cadence-store's own file (reported)."""
        consumer, state = self.directory / "direct-consumer", self.directory / "direct-state"
        consumer.mkdir()
        target = Path(resolve_state_root(consumer, xdg_state_home=str(state)).database_path)
        sqlite_copy(self.py_path, target)
        worker = Worker(self.node, self.source)
        try:
            answer = worker.ask(
                {
                    "open": {"consumerRoot": str(consumer), "stateBase": str(state)},
                    "now": self.known.now,
                }
            )
        finally:
            worker.close()
        return "opened" if "ok" in answer else js_outcome("open", answer)[1]


def node_and_source() -> tuple[str, Path]:
    located = locate()
    if isinstance(located, str):
        raise SystemExit(f"cannot run cadence 1.x: {located}")
    return located


class Script:
    """A chooser replaying calls from a file: `"$run0"` is the first run made in the replay,
    `"$lease0"` the first lease granted (cadence 1.x's object); a clock call adds its
    milliseconds."""

    def __init__(self, calls: list[dict[str, Any]], known: Knowledge) -> None:
        self.calls, self.known = calls, known

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$run"):
            return self.known.runs[int(value[4:])]
        if isinstance(value, str) and value.startswith("$lease"):
            return dict(self.known.leases[int(value[6:])][0])
        if isinstance(value, list):
            return [self._resolve(item) for item in value]
        if isinstance(value, dict):
            return {key: self._resolve(item) for key, item in value.items()}
        return value

    def next(self) -> Call:
        entry = self.calls.pop(0)
        if entry["call"] == "clock":
            return Call("clock", [self.known.now + entry["args"][0]])
        return Call(entry["call"], self._resolve(entry["args"]), entry.get("write"))


def replay(path: Path, directory: Path) -> None:
    """Make the calls of a file on both stores, printing both answers of each."""
    node, source = node_and_source()
    calls = json.loads(path.read_text(encoding="utf-8"))
    episode = Episode(node, source, directory / "replay", 0, 0, Tally())
    episode.chooser = Script(calls, episode.known)  # type: ignore[assignment]
    episode.trace = []
    try:
        for index in range(len(calls)):
            episode.step(index)
        # as in a run, rows a call's difference left behind are that difference's
        episode.compare_tables(-1, after_difference=bool(episode.tally.differences))
        episode.cross_verify(-1)
    finally:
        episode.close()
    for call, py, js in episode.trace:
        print(f"{call.kind} {short(call.args, 80)}")
        print(f"    cadence-store {py[0]} {short(py[1], 400)}")
        print(f"    cadence 1.x   {js[0]} {short(js[1], 400)}")
    for difference in episode.tally.differences:
        print(f"difference: {difference.group()}")
        if difference.where == "verification":
            print(f"    {difference.detail['problem'][:400]}")


def run(
    steps: int, seed: int, episode_steps: int, check_every: int, bad_inputs: float, directory: Path
) -> Tally:
    node, source = node_and_source()
    tally = Tally()
    tally.info["node"] = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tally.info["source"] = str(source)
    number = 0
    while tally.steps < steps:
        episode = Episode(node, source, directory / f"episode-{number}", seed, number, tally)
        episode.chooser.bad_inputs = bad_inputs
        tally.episodes += 1
        diverged = False
        try:
            for index in range(min(episode_steps, steps - tally.steps)):
                if not episode.step(index):
                    diverged = True
                    break
                if (index + 1) % check_every == 0 and episode.compare_tables(index):
                    diverged = True
                    break
            if not diverged:
                episode.compare_tables(-1)
            episode.cross_verify(-1)
            if number == 0:
                tally.info["cadence 1.x opening cadence-store's own file"] = (
                    episode.opens_the_other_file()
                )
        finally:
            episode.close()
        tally.diverged_episodes += diverged
        shutil.rmtree(directory / f"episode-{number}", ignore_errors=True)
        number += 1
    return tally


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--episode", type=int, default=250, help="calls per pair of stores")
    parser.add_argument(
        "--check-every", type=int, default=100, help="calls between table comparisons"
    )
    parser.add_argument(
        "--bad-inputs", type=float, default=0.04, help="share of calls given a bad input"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "differential-results.json"
    )
    parser.add_argument("--replay", type=Path, help="make the calls of this JSON file instead")
    arguments = parser.parse_args(argv)
    # a run that fails verification is logged as a warning: here it is a recorded difference
    logging.getLogger("cadence_store").setLevel(logging.ERROR)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cadence-differential-") as directory:
        if arguments.replay is not None:
            replay(arguments.replay, Path(directory))
            return
        tally = run(
            arguments.steps,
            arguments.seed,
            arguments.episode,
            arguments.check_every,
            arguments.bad_inputs,
            Path(directory),
        )
    results = report(tally, time.monotonic() - started, arguments)
    arguments.out.write_text(
        json.dumps(results, indent=1, ensure_ascii=True) + "\n", encoding="utf-8"
    )
    print(f"\nwritten: {arguments.out}")


if __name__ == "__main__":
    main()
