"""The web view in a real browser: Debian's Chromium, headless, driven by Playwright,
against `cadence-store serve` started as a subprocess, on SQLite and PostgreSQL.

Skipped with the reason when Chromium cannot start; under CI=true that is a failure.
`CADENCE_WEB_SCREENSHOT=PATH` also writes the run page's screenshot there (the docs').
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from web_support import SCRIPT, break_chain, hostile_run, long_run, plain_runs

from cadence_store import RunStore

START_TIMEOUT_S = 30
CHROMIUM = os.environ.get("CADENCE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
        pytest.fail(f"a browser is required under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module: while Playwright's sync API runs, its event
    loop is the thread's running loop, so it must end before other modules call asyncio.run."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        _unavailable(f"playwright is not installed ({error})")
    manager = sync_playwright().start()
    try:
        launched = manager.chromium.launch(executable_path=CHROMIUM, headless=True)
    except Exception as error:
        manager.stop()
        _unavailable(f"Chromium ({CHROMIUM}) cannot start: {error}")
    try:
        yield launched
    finally:
        launched.close()
        manager.stop()


@contextmanager
def serving(url: str) -> Iterator[str]:
    """`cadence-store serve --url URL --port 0` running; its base URL. Stopped with
    SIGINT (Ctrl-C), which must end it cleanly (exit status 0)."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "cadence_store", "serve", "--url", url, "--port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stdout])  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        base = None
        while base is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"serve did not say where it listens: {process.stderr}")
            if "listening on http://" in line:
                base = line.split("listening on ", 1)[1].strip().rstrip("/")
        assert base.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        reader.join()
        stderr = process.stderr.read() if process.stderr else ""
        assert code == 0, stderr
        assert "Traceback" not in stderr, stderr


def _cells(page: Any, table: str, column: int) -> list[str]:
    texts: list[str] = page.locator(f"#{table} tbody tr td:nth-child({column})").all_inner_texts()
    return texts


def test_the_view_in_a_browser(
    browser: Any, run_store: RunStore, store_url: str, db: Engine, request: Any
) -> None:
    ids = sorted([*plain_runs(run_store, 55), hostile_run(run_store)])
    validating = sorted(run.run_id for run in run_store.list_runs(state="validating-delivery"))
    page = browser.new_page(viewport={"width": 1200, "height": 820})
    problems: list[str] = []
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    page.on("pageerror", lambda error: problems.append(str(error)))
    with serving(store_url) as base:
        # the list shows the test's runs, 50 a page; next and previous by clicking
        page.goto(f"{base}/")
        assert _cells(page, "runs", 1) == ids[:50]
        page.click("#next-page")
        page.wait_for_url("**after=**")
        assert _cells(page, "runs", 1) == ids[50:]
        page.click("#previous-page")
        page.wait_for_url("**before=**")
        assert _cells(page, "runs", 1) == ids[:50]
        assert page.locator("#previous-page").count() == 0  # the first page, by keyset
        assert page.locator("#next-page").count() == 1
        # each run's created and updated times (UTC)
        assert all(text.endswith("Z") for text in _cells(page, "runs", 5) + _cells(page, "runs", 6))
        # a filter, chosen and applied by clicking
        page.select_option("select[name=state]", "validating-delivery")
        page.click("#apply-filters")
        page.wait_for_url("**state=validating-delivery**")
        assert _cells(page, "runs", 1) == validating
        assert set(_cells(page, "runs", 3)) == {"validating-delivery"}
        # a run's page: its events in order, each with its time
        page.click(f"a[href='/runs/{validating[0]}']")
        page.wait_for_url(f"**/runs/{validating[0]}")
        assert _cells(page, "events", 1) == ["1", "2"]
        times = _cells(page, "events", 3)
        assert all(text.endswith("Z") for text in times) and times == sorted(times)
        assert page.inner_text("#verification") == "chain verifies"
        page.click("#events tbody tr:first-child summary")
        screenshot = page.screenshot(full_page=False)
        target = os.environ.get("CADENCE_WEB_SCREENSHOT")
        if target and "sqlite" in request.node.name:
            Path(target).write_bytes(screenshot)
        # the chain broken behind the store's back: the badge says so
        break_chain(db, validating[0], 2)
        page.reload()
        assert page.inner_text("#verification").startswith("broken: ")
        # a script in a stored outcome and pause code stays text
        hostile = next(run_id for run_id in ids if run_store.status(run_id).state == "paused")
        page.goto(f"{base}/runs/{hostile}")
        for summary in page.locator("#operations summary").all():
            summary.click()
        assert SCRIPT in page.inner_text("#operations")
        assert page.evaluate("window.__cadencePwned") is None
        # a long run's events, 200 a page: through its pages by clicking
        long = long_run(run_store, 125)  # 254 events
        page.goto(f"{base}/runs/{long}")
        assert _cells(page, "events", 1) == [str(number) for number in range(1, 201)]
        page.click("nav.pages >> nth=0 >> .next-events")
        page.wait_for_url("**after=200")
        assert _cells(page, "events", 1) == [str(number) for number in range(201, 255)]
        assert page.locator(".next-events").count() == 0
        page.click("nav.pages >> nth=0 >> .previous-events")
        page.wait_for_url("**before=201")
        assert _cells(page, "events", 1)[0] == "1"
        page.click("nav.pages >> nth=0 >> .last-events")
        page.wait_for_url("**before=255")
        assert _cells(page, "events", 1) == [str(number) for number in range(55, 255)]
        assert page.inner_text("#verification") == "chain verifies"
        page.goto(f"{base}/feed")
        page.goto(f"{base}/runs/no-such-run")
        assert page.inner_text("#error-code") == "run-not-found"
    page.close()
    # the 404 above is the only thing the console may report
    assert [text for text in problems if "404" not in text] == []
