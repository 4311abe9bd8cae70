"""The two sides of `differential_cadence1x.py`: cadence 1.x's `RunStore` in a Node process
(`cadence1x_differential_worker.mjs`) and cadence-store's `RunStore`, each making a `Call`
and answering an `Outcome` the other can be compared with, and the owned tables' rows of
either file on cadence 1.x's columns.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from differential_calls import Call
from sqlalchemy import text

from cadence_store import OperationLease, OperationStatus, RunProjection, RunStore

Outcome = tuple[str, str]  # ("ok", JSON text or "undefined") | ("error", code)
HostWrite = Callable[[Any], None]


class HostRefused(Exception):
    """A host's `write` refusing, as the 1.x worker's `throw new Error("host-write-refused")`."""


WORKER = Path(__file__).resolve().parent / "cadence1x_differential_worker.mjs"
PROJECTION_CALLS = {
    "startRun",
    "bindChange",
    "bindDelivery",
    "bindDeliveryAtomically",
    "bindDeliveriesAtomically",
    "transition",
    "transitionAtomically",
    "status",
    "rebuildProjection",
    "verifyIntegrity",
}
KEYS = {
    "runs": ("run_id",),
    "events": ("run_id", "sequence"),
    "operations": ("run_id", "operation_id"),
    "delivery_bindings": ("run_id", "gate", "revision"),
}


def normal(value: Any) -> str:
    """JSON text of a value, keys in their order (the comparison of non-projections)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def short(value: Any, limit: int = 300) -> Any:
    """A value for the report: long strings cut (a 70,000-character code is named)."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"<{len(value)} chars: {value[:40]!r}...>"
    if isinstance(value, list):
        return [short(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: short(item, limit) for key, item in value.items()}
    return value


class Worker:
    """The Node process holding one cadence 1.x store."""

    def __init__(self, node: str, source: Path) -> None:
        self.process = subprocess.Popen(
            [node, "--no-warnings", str(WORKER), str(source)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(normal(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the cadence 1.x worker ended")
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(answer["fatal"])
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        try:
            self.ask({"close": True})
        finally:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def js_outcome(name: str, answer: dict[str, Any]) -> Outcome:
    if "error" in answer:
        error = answer["error"]
        if error["errcode"] is not None:
            return ("error", f"sqlite-error: {error['message']}")
        if error["code"] is not None and error["name"] != "Error":
            return ("error", error["code"])
        if error["name"] == "Error":
            return ("error", error["code"] or error["message"])
        return ("error", f"{error['name']}: {error['message']}")
    if answer.get("undefined"):
        return ("ok", "undefined")
    text = answer["json"]
    return ("ok", text if name in PROJECTION_CALLS else normal(json.loads(text)))


def python_outcome(value: Any) -> Outcome:
    if value is None:
        return ("ok", "undefined")
    if isinstance(value, RunProjection):
        return ("ok", value.to_json())
    if isinstance(value, OperationLease | OperationStatus):
        return ("ok", normal(value.to_dict()))
    if isinstance(value, list):
        return ("ok", normal([event.to_dict() for event in value]))
    return ("ok", normal(value))


def table_rows(path: str, columns: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    """The four owned tables' rows on cadence 1.x's columns, in primary-key order."""
    connection = sqlite3.connect(path, timeout=30)
    try:
        return {
            table: [
                tuple(row)
                for row in connection.execute(
                    # names from PRAGMA table_info and this module, never from input
                    f"SELECT {', '.join(names)} FROM {table} ORDER BY {', '.join(KEYS[table])}"  # noqa: S608
                )
            ]
            for table, names in columns.items()
        }
    finally:
        connection.close()


def table_differences(left: dict[str, list[Any]], right: dict[str, list[Any]]) -> list[str]:
    found = []
    for table, rows in left.items():
        only_left = [row for row in rows if row not in right[table]]
        only_right = [row for row in right[table] if row not in rows]
        if only_left or only_right or rows != right[table]:
            found.append(
                f"{table}: cadence-store only {short(only_left[:2], 120)}, "
                f"cadence 1.x only {short(only_right[:2], 120)}"
            )
    return found


def sqlite_copy(source: str, target: Path) -> None:
    """A consistent copy of a live WAL database (SQLite's backup API)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(source, timeout=30) as reading, sqlite3.connect(target) as writing:
        reading.backup(writing)
    reading.close()
    writing.close()


# -- the same call on cadence-store ---------------------------------------------------------


def host_write(kind: str | None, counter: list[int]) -> HostWrite:
    def write(session: Any) -> None:
        counter[0] += 1
        if kind == "sql":
            session.execute(text("INSERT INTO differential_missing_host_table VALUES (1)"))
        elif kind == "throw":
            raise HostRefused("host-write-refused")

    return write


def _lease_arg(call: Call, path: str, value: Any) -> Any:
    return call.lease_objects.get(path, value)


def _binding_kwargs(call: Call, data: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "operation_id": data.get("operationId"),
        "approval_proof": data.get("approvalProof"),
        "lease": _lease_arg(call, path, data.get("lease")),
    }


def call_cadence_store(store: RunStore, call: Call, writes: list[int]) -> Any:
    """Make `call` on `store` (its Python signature); `writes[0]` counts host writes."""
    args, name = call.args, call.name
    write = host_write(call.write, writes)
    if name == "startRun":
        data = args[0]
        return store.start_run(
            data.get("stage"),
            operation_id=data.get("operationId"),
            change=data.get("change"),
            provisional_key=data.get("provisionalKey"),
            provisional_aliases=data.get("provisionalAliases"),
        )
    if name == "bindChange":
        data = args[0]
        return store.bind_change(
            data.get("runId"), data.get("change"), operation_id=data.get("operationId")
        )
    if name in ("bindDelivery", "bindDeliveryAtomically"):
        data = args[0]
        positional = (
            data.get("runId"),
            data.get("gate"),
            data.get("revision"),
            data.get("receiptHash"),
        )
        if name == "bindDelivery":
            return store.bind_delivery(*positional, **_binding_kwargs(call, data, "0"))
        return store.bind_delivery_atomically(
            *positional, write=write, **_binding_kwargs(call, data, "0")
        )
    if name == "bindDeliveriesAtomically":
        items = [
            {**item, "lease": _lease_arg(call, f"0.{index}", item["lease"])}
            if "lease" in item
            else item
            for index, item in enumerate(args[0])
        ]
        return store.bind_deliveries_atomically(items, write=write)
    if name in ("transition", "transitionAtomically"):
        data = args[0]
        options = {
            "operation_id": data.get("operationId"),
            "code": data.get("code"),
            "lease": _lease_arg(call, "0", data.get("lease")),
        }
        if name == "transition":
            return store.transition(data.get("runId"), data.get("to"), **options)
        return store.transition_atomically(
            data.get("runId"), data.get("to"), write=write, **options
        )
    if name == "acquireLease":
        data = args[0]
        options = {key: data[key] for key in ("preempt", "exclusive") if key in data}
        return store.acquire_lease(
            data.get("runId"), data.get("operationId"), data.get("ttlMs"), **options
        )
    if name in ("renewLease", "assertLease", "commitLease", "interruptLease"):
        method = {
            "renewLease": store.renew_lease,
            "assertLease": store.assert_lease,
            "commitLease": store.commit_lease,
            "interruptLease": store.interrupt_lease,
        }[name]
        return method(_lease_arg(call, "0", args[0]), *args[1:])
    if name == "inspectOperation":
        return store.inspect_operation(args[0], args[1])
    if name == "recoverExpiredLeases":
        return store.recover_expired_leases()
    reads = {
        "status": store.status,
        "listEvents": store.list_events,
        "rebuildProjection": store.rebuild_projection,
        "verifyIntegrity": store.verify_integrity,
    }
    return reads[name](args[0])
