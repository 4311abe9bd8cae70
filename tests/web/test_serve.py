"""`cadence-store serve`'s refusals, on both engines (the browser tests run it serving)."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from cadence_store.cli import main


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
