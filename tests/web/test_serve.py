"""`cadence-store serve`'s refusals, on both engines (the browser tests run it serving),
and the heap it freezes once the app is built."""

from __future__ import annotations

import gc
import socket

from click.testing import CliRunner

from cadence_store.cli import main
from cadence_store.web.process import freeze_startup_heap


def test_serve_refuses_an_address_in_use_with_its_code(store_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--url", store_url, "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert "error: serve-address-unavailable" in result.stderr


def test_serve_needs_a_store_that_exists(tmp_path: object) -> None:
    missing = f"sqlite:///{tmp_path}/missing.sqlite3"
    result = CliRunner().invoke(main, ["serve", "--url", missing, "--port", "0"])
    assert result.exit_code == 3, result.output
    assert "error: run-store-upgrade-required" in result.stderr


def test_the_heap_serve_starts_with_is_left_out_of_collections() -> None:
    started_with = [{"a start-up object": n} for n in range(1000)]
    try:
        freeze_startup_heap()
        frozen = gc.get_freeze_count()
        assert frozen >= len(started_with)
        gc.collect()  # a full pass leaves the frozen objects where they are
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
    assert gc.get_freeze_count() == 0
