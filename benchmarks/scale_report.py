"""The table and the targets of `benchmarks.scale`: each call at size against the small
store, with the issue's target for it and whether it was met."""

from __future__ import annotations

from typing import Any

READ_P50, READ_P99, WRITE_P50, DEEP_VS_FIRST = 1.5, 2.0, 1.1, 1.5
VERIFY_RATIO, VERIFY_RSS_MB = 0.9, 150
FOLLOWER_EVENTS_PER_S = {"sqlite": 100_000, "postgresql": 50_000}
WRITES = ("start_run (new key)", "start_run (replayed operation id)", "transition")
LEASES = ("acquire_lease", "renew_lease", "assert_lease", "commit_lease")


def _ratio(big: float, small: float) -> float | None:
    return round(big / small, 2) if small else None


def _row(
    name: str, small: dict[str, Any] | None, big: dict[str, Any], *, call: str | None = None
) -> dict[str, Any]:
    """One call's row (`call`: the call's own name, where `name` adds how it was timed);
    its target: writes p50 <= 1.1x, reads p50 <= 1.5x and p99 <= 2x."""
    row: dict[str, Any] = {"call": name, "at_size": big, "small": small}
    if small is None:
        return row
    p50 = _ratio(big["p50_ms"], small["p50_ms"])
    p99 = _ratio(big["p99_ms"], small["p99_ms"])
    row.update(p50_ratio=p50, p99_ratio=p99)
    if "page_reads_per_call" in big and "page_reads_per_call" in small:
        row["page_reads"] = (small["page_reads_per_call"], big["page_reads_per_call"])
    if "blocks_read_per_write" in big and "blocks_read_per_write" in small:
        row["blocks_read"] = (small["blocks_read_per_write"], big["blocks_read_per_write"])
        row["wal_bytes"] = (small["wal_bytes_per_call"], big["wal_bytes_per_call"])
    if (call or name) in WRITES:
        row["target"] = f"p50 <= {WRITE_P50}x"
        row["met"] = p50 is not None and p50 <= WRITE_P50
    elif name in LEASES or name == "lease calls":
        row["target"] = "(none stated)"
    else:
        row["target"] = f"p50 <= {READ_P50}x, p99 <= {READ_P99}x"
        row["met"] = p50 is not None and p99 is not None and p50 <= READ_P50 and p99 <= READ_P99
    return row


def rows(engine: str, small: dict[str, Any] | None, big: dict[str, Any]) -> list[dict[str, Any]]:
    """Every compared figure of one engine: warm and cold calls, then the whole-store ones."""
    found: list[dict[str, Any]] = []
    for mode, said in (("warm", ""), ("writes_alone", " (writes alone)"), ("cold", " (cold)")):
        for name, figures in big.get(mode, {}).items():
            earlier = _same_call(small, mode, name) if small else None
            found.append(_row(f"{name}{said}", earlier, figures, call=name))
    deep = next((n for n in big.get("warm", {}) if n.startswith("list_runs (page")), None)
    if deep is not None and "list_runs (first page)" in big["warm"]:
        first, paged = big["warm"]["list_runs (first page)"], big["warm"][deep]
        ratio = _ratio(paged["p99_ms"], first["p99_ms"])
        found.append(
            {
                "call": f"{deep} against the first page, at size (p99)",
                "value": ratio,
                "target": f"<= {DEEP_VS_FIRST}x",
                "met": ratio is not None and ratio <= DEEP_VS_FIRST,
            }
        )
    if "verify_store" in big:
        at_size = big["verify_store"]
        ratio = (
            _ratio(at_size["events_per_s"], small["verify_store"]["events_per_s"])
            if small and "verify_store" in small
            else None
        )
        found.append(
            {
                "call": "verify (whole store), events/s at size / small",
                "value": ratio,
                "detail": f"{at_size['events_per_s']:,} events/s, {at_size['broken']} broken",
                "target": f">= {VERIFY_RATIO}x",
                "met": ratio is not None and ratio >= VERIFY_RATIO,
            }
        )
        found.append(
            {
                "call": "verify (whole store), peak RSS MB",
                "value": at_size["peak_rss_mb"],
                "target": f"<= {VERIFY_RSS_MB}",
                "met": at_size["peak_rss_mb"] <= VERIFY_RSS_MB,
            }
        )
    if "follower" in big:
        speed = big["follower"]["events_per_s"]
        found.append(
            {
                "call": "follower catching up from 0, events/s",
                "value": speed,
                "target": f">= {FOLLOWER_EVENTS_PER_S[engine]:,}",
                "met": speed >= FOLLOWER_EVENTS_PER_S[engine],
            }
        )
    return found


def _same_call(small: dict[str, Any], mode: str, name: str) -> dict[str, Any] | None:
    calls = small.get(mode, {})
    if name in calls:
        return dict(calls[name])
    if name.startswith("list_runs (page"):  # the deep page is shallower on a small store
        return next((dict(v) for k, v in calls.items() if k.startswith("list_runs (page")), None)
    return None


def _figures(entry: dict[str, Any] | None) -> str:
    if not entry:
        return f"{'-':>19}"
    return f"{entry['p50_ms']:>9.2f}{entry['p99_ms']:>10.2f}"


def table(engine: str, size: str, found: list[dict[str, Any]], load: list[float]) -> str:
    lines = [
        f"\n{engine}: {size} against small (ms; load average {load})",
        f"{'call':<58}{'small p50':>10}{'p99':>9}{'size p50':>10}{'p99':>10}"
        f"{'x p50':>7}{'x p99':>7}  target / met",
    ]
    for row in found:
        if "at_size" in row:
            ratios = f"{row.get('p50_ratio') or '-':>7}{row.get('p99_ratio') or '-':>7}"
            verdict = f"{row.get('target', '')} {_met(row)}"
            if "page_reads" in row:
                verdict += " (page reads a call {} -> {})".format(*row["page_reads"])
            if "blocks_read" in row:
                verdict += " (blocks read a write, the pass: {} -> {})".format(*row["blocks_read"])
                verdict += " (WAL bytes a call {} -> {})".format(*row["wal_bytes"])
            lines.append(
                f"{row['call'][:57]:<58}{_figures(row['small'])}{_figures(row['at_size'])}"
                f"{ratios}  {verdict}"
            )
        else:
            detail = f" ({row['detail']})" if "detail" in row else ""
            lines.append(
                f"{row['call'][:57]:<58}{row['value']!s:>46}  {row['target']} {_met(row)}{detail}"
            )
    return "\n".join(lines)


def _met(row: dict[str, Any]) -> str:
    if "met" not in row:
        return ""
    return "met" if row["met"] else "NOT met"


def storage_lines(engine: str, size: str, storage: dict[str, Any]) -> str:
    ours = storage["cadence_store"]
    lines = [
        f"\n{engine} {size}: bytes per event ({storage['events']:,} events): store "
        f"{ours['store_bytes_per_event']}, events table + its indexes "
        f"{ours['events_table_and_indexes_bytes_per_event']}"
    ]
    for table_name, entry in sorted(ours["tables"].items()):
        indexes = ", ".join(f"{k} {v / storage['events']:.1f}" for k, v in entry["indexes"].items())
        lines.append(
            f"  {table_name}: {entry['bytes'] / storage['events']:.1f}"
            + (f" (indexes: {indexes})" if indexes else "")
        )
    if "cadence_1x_shaped" in storage:
        theirs = storage["cadence_1x_shaped"]
        lines.append(
            f"  the same rows in cadence 1.x's tables: {theirs['store_bytes_per_event']} per event"
            f" (events + indexes {theirs['events_table_and_indexes_bytes_per_event']});"
            f" ratio {storage['ratio']}x (target <= 1.25x)"
        )
    return "\n".join(lines)
