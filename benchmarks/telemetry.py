"""What telemetry costs a durable transition: none, the API alone, the SDK, side by side.

`python -m benchmarks` runs it per engine (section `telemetry`); alone:
`python -m benchmarks.telemetry [--quick] [--engines sqlite,postgresql] [--before DIR]`.

Each configuration runs in a process of its own (`telemetry_worker.py`): whether
opentelemetry is importable is decided when cadence_store is imported, so `none` must
be a process where it is not. The processes take turns, a batch at a time, in a fresh
random order every round (as `common.interleave`), each on its own run of one database
(the earlier version on a database of its own, same engine and disk), and the report gives medians and their ratios to `none`. `--before DIR`
adds an earlier version of the library (a source tree holding `cadence_store/` and
`migrations/`, e.g. `git archive main cadence_store migrations | tar -x -C DIR`).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from .common import (
    HERE,
    Engine,
    benchmark_arguments,
    engines_of,
    median_ms,
    postgres_server,
)

WORKER = HERE / "telemetry_worker.py"
VARIANTS = ("none", "api", "sdk")
# Turns of two calls: this disk's fsync is slow or fast in stretches of seconds, and
# with turns of 50 calls a variant that happened to get more slow stretches looked up to
# 1.5x dearer (measured, in one process, same code); turns of one or two calls agree
# within 1 %.
PER_ROUND = 2
ROUNDS = 1500
QUICK_ROUNDS = 400


class _Worker:
    def __init__(self, variant: str, url: str, source: Path | None) -> None:
        env = dict(os.environ)
        if source is not None:
            env["PYTHONPATH"] = str(source)
        self.variant = variant
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), variant, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.module = self._answer()["module"]

    def _answer(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"telemetry worker {self.variant} exited")
        return json.loads(line)

    def run(self, count: int) -> list[float]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"run {count}\n")
        self.process.stdin.flush()
        samples: list[float] = self._answer()
        return samples

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)


def bench_telemetry(
    engine: Engine, rounds: int, per_round: int, before: Path | None = None
) -> dict[str, Any]:
    """Median durable transition per telemetry configuration, interleaved."""
    variants = [*VARIANTS, *(["before"] if before is not None else [])]
    # one database for this version's variants (a run each), so that no variant gets a
    # luckier file or server database; the earlier version's schema needs its own
    shared = engine.fresh_url()
    workers = {
        name: _Worker(name, engine.fresh_url(), before)
        if name == "before"
        else _Worker(name, shared, None)
        for name in variants
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for worker in workers.values():
            worker.run(50)  # warm-up: statements compiled, pages cached
        for _ in range(rounds):
            order = list(variants)
            random.shuffle(order)
            for name in order:
                samples[name] += workers[name].run(per_round)
    finally:
        for worker in workers.values():
            worker.close()
    medians = {name: median_ms(values) for name, values in samples.items()}
    result: dict[str, Any] = {f"{name}_ms": round(median, 4) for name, median in medians.items()}
    for name in variants[1:]:
        result[f"{name}_ratio"] = round(medians[name] / medians["none"], 4)
    result["samples"] = len(samples["none"])
    if before is not None:
        result["before_module"] = workers["before"].module
    return result


def _cell(row: dict[str, Any], name: str) -> str:
    if f"{name}_ms" not in row:
        return "-"
    ratio = row.get(f"{name}_ratio")
    return f"{row[f'{name}_ms']:.3f}" + (f" ({ratio:.3f}x)" if ratio else "")


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "durable transition by telemetry configuration (median ms; ratio to none)",
        f"{'engine':<12}{'none':>10}{'api only':>18}{'sdk+memory':>18}{'before':>18}",
    ]
    for engine, row in results.items():
        cells = [_cell(row, name) for name in ("none", "api", "sdk", "before")]
        lines.append(f"{engine:<12}{cells[0]:>10}{cells[1]:>18}{cells[2]:>18}{cells[3]:>18}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(
        "benchmarks.telemetry", "telemetry-results.json", description=__doc__, before=True
    )
    args = parser.parse_args(argv)
    engines = engines_of(args)
    results: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-tel-")))
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            print(f"[{name}] durable transition: no telemetry / API only / SDK ...", flush=True)
            results[name] = bench_telemetry(
                Engine(name, workdir, pg_url),
                rounds=QUICK_ROUNDS if args.quick else ROUNDS,
                per_round=PER_ROUND,
                before=args.before,
            )
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
