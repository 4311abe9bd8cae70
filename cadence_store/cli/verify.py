"""`verify`: hash chains and stored projections, in a database or an export file."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import click

from ..parallel_verify import iter_verified_runs
from ..store import checkpoints as store_checkpoints
from ..transfer import RunCheck, iter_verify_export
from ..transfer.archive_file import ArchiveVerification, verify_archive
from . import checkpoints, render
from .group import describe, json_option, main, open_input, opened, progress_bar, url_option

# -- verification ---------------------------------------------------------------------------


def _check_json(check: RunCheck) -> dict[str, Any]:
    """One broken run as JSON: what `_report_checks` prints, field by field."""
    fields = {
        "runId": check.run_id,
        "line": check.line,
        "code": check.code,
        "sequence": check.sequence,
        "field": check.field,
        "operationId": check.operation_id,
        "detail": check.detail,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _tally(checks: Iterable[RunCheck], on_each: Callable[[], object]) -> tuple[int, list[RunCheck]]:
    """How many checks there were, and the broken ones (a whole store's verdicts are
    counted as they come, not kept)."""
    verified = 0
    broken: list[RunCheck] = []
    for check in checks:
        verified += 1
        if not check.ok:
            broken.append(check)
        on_each()
    return verified, broken


def _report_checks(
    verified: int,
    broken: Sequence[RunCheck],
    label: str,
    *,
    as_json: bool = False,
    kept: int | None = None,
) -> None:
    """`verified` runs checked, `broken` those that failed; `kept`: the archived runs'
    leaves checked against the stored tree (a whole store)."""
    if as_json:
        report: dict[str, Any] = {
            "database": label,
            "verified": verified,
            "ok": verified - len(broken),
            "broken": [_check_json(check) for check in broken],
        }
        if kept:
            report["keptLeaves"] = kept
        click.echo(render.printable(json.dumps(report, ensure_ascii=False)))
        if broken:
            sys.exit(render.EXIT_CORRUPT)
        return
    for check in broken:
        where = f"line {check.line}: " if check.line is not None else ""
        if check.detail.startswith(where):  # a record's parse error already names its line
            where = ""
        name = check.run_id or "(unreadable record)"
        click.echo(render.printable(f"BROKEN run {name}: {where}{check.detail}"))
    click.echo(
        f"verified {verified} run(s) in {label}: {verified - len(broken)} ok, {len(broken)} broken"
    )
    if kept:
        click.echo(f"{kept} leaf(s) of archived runs match the stored tree")
    if broken:
        sys.exit(render.EXIT_CORRUPT)


def _verify_file(path: str, *, as_json: bool) -> None:
    with open_input(path) as lines, progress_bar() as bar:
        task = bar.add_task("verifying", total=None)
        verified, broken = _tally(iter_verify_export(lines), lambda: bar.advance(task))
        bar.update(task, total=verified)
    _report_checks(verified, broken, path, as_json=as_json)


def _verify_archive(path: str, checkpoint_file: str, vkey: str, *, as_json: bool) -> None:
    note = checkpoints.read_note_file(checkpoint_file)
    key = checkpoints.read_verifier_key(vkey)
    with open_input(path) as lines, progress_bar() as bar:
        task = bar.add_task("verifying archive lines", total=None)

        def counted() -> Iterator[str]:
            for line in lines:
                bar.advance(task)
                yield line

        report = verify_archive(counted(), note, key)
    _report_archive(report, path, as_json=as_json)


def _report_archive(report: ArchiveVerification, path: str, *, as_json: bool) -> None:
    if as_json:
        document = {"archive": path, **report.to_json()}
        click.echo(render.printable(json.dumps(document, ensure_ascii=False)))
    elif report.failure is not None:
        failure = report.failure
        click.echo(render.printable(f"BROKEN archive {path}: {failure.detail} ({failure.code})"))
        click.echo(
            f"archive {path} does not verify: {report.runs} run(s), {report.events} event(s) "
            f"read, {report.broken} run(s) broken"
        )
    else:
        click.echo(
            f"archive {path} verified: {report.runs} run(s), {report.events} event(s); every "
            f"event's leaf is in the tree of {report.tree_size} leaves (root {report.root_hash}) "
            f"that the checkpoint of {report.origin} signs"
        )
        if report.later_checkpoint:
            click.echo(
                "the checkpoint given is later than the archive's: that the two are "
                "consistent is checked on the store (verify --checkpoint with each note)"
            )
    if not report.ok:
        sys.exit(render.EXIT_CORRUPT)


@main.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@url_option
@click.option(
    "--file",
    "file_",
    metavar="FILE",
    help="Check an export file offline instead (no database; '-' reads standard input).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Verify the database's runs across N processes.",
)
@click.option(
    "--checkpoint",
    "checkpoint_file",
    metavar="FILE",
    help="Check a signed checkpoint against the store (with --vkey): its signature, the "
    "tree at its size recomputed from the events, and every chain.",
)
@click.option("--vkey", metavar="KEY", help="The checkpoint's verifier key, or a file holding it.")
@click.option(
    "--archive",
    "archive_file",
    metavar="FILE",
    help="Check an archive file offline instead (with --checkpoint and --vkey; no database): "
    "its checkpoint's signature, every chain, every event's inclusion proof, its trailer.",
)
@json_option
def verify(
    run_ids: Sequence[str],
    url: str | None,
    file_: str | None,
    jobs: int,
    checkpoint_file: str | None,
    vkey: str | None,
    archive_file: str | None,
    as_json: bool,
) -> None:
    """Verify hash chains and stored projections (all runs, or the ones named).

    Names every broken run, its first bad sequence and what differs; exits 1 if any.

    \b
    Example: cadence-store verify --url sqlite:///control.sqlite3
    Example: cadence-store verify --jobs 2 --url postgresql+psycopg://app@db/cadence
    Example: cadence-store verify --file runs.jsonl
    Example: cadence-store verify --json (one JSON object: counts and every broken run)
    Example: cadence-store verify --checkpoint head.txt --vkey runs.vkey
    Example: cadence-store verify --archive runs-2025.archive --checkpoint head.txt --vkey runs.vkey
    """
    if archive_file is not None:
        if checkpoint_file is None or vkey is None:
            raise click.UsageError("--archive needs --checkpoint and --vkey")
        if run_ids or file_ is not None:
            raise click.UsageError("--archive checks one archive file; name no run or --file")
        _verify_archive(archive_file, checkpoint_file, vkey, as_json=as_json)
        return
    if checkpoint_file is not None or vkey is not None:
        if checkpoint_file is None or vkey is None:
            raise click.UsageError("--checkpoint and --vkey go together")
        if run_ids or file_ is not None:
            raise click.UsageError("--checkpoint checks the whole store; name no run or --file")
        with opened(url) as store:
            report = checkpoints.verify_checkpoint_file(store, checkpoint_file, vkey)
        checkpoints.print_report(report, as_json=as_json)
        return
    if file_ is not None:
        if run_ids:
            raise click.UsageError("--file checks a whole export; do not name runs with it")
        _verify_file(file_, as_json=as_json)
        return
    with opened(url) as store:
        for run_id in run_ids:
            store.status(run_id)  # an unknown id is a usage error, before any work
        # the whole store's ids are read page by page (one job) as the runs are verified
        ids = list(run_ids) if run_ids else None
        total = len(ids) if ids is not None else store.counts().runs
        with progress_bar() as bar:
            task = bar.add_task("verifying runs", total=total)
            checks = iter_verified_runs(store, ids, jobs=jobs)
            verified, broken = _tally(checks, lambda: bar.advance(task))
        # the whole store: the leaves its archives kept too (`checkpoint-mismatch`: exit 1)
        kept = None if run_ids else store_checkpoints.verify_kept_leaves(store.transactions)
        label = describe(store)
    _report_checks(verified, broken, label, as_json=as_json, kept=kept)
