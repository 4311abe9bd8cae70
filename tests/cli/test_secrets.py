"""No command ever prints a database password."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import make_url

from cadence_store.cli.render import error_lines, scrub
from cadence_store.errors import StoreUnavailableError

SECRET = "s3cret"


def with_password(url: str, password: str = SECRET) -> str:
    return make_url(url).set(password=password).render_as_string(hide_password=False)


def test_info_on_postgresql_never_prints_the_password(
    cli: Any, pg_database_url: str, fixture_url: str
) -> None:
    url = with_password(pg_database_url)
    assert SECRET in url

    before = cli("runs", "--url", url)  # not at head yet
    assert before.exit_code == 3
    assert "error: run-store-upgrade-required" in before.stderr
    assert "cadence-store upgrade --url" in before.stderr
    assert SECRET not in before.output

    upgraded = cli("upgrade", "--url", url)
    assert upgraded.exit_code == 0, upgraded.output
    assert "***" in upgraded.stdout and SECRET not in upgraded.output

    copied = cli("copy", "--from", fixture_url, "--to", url)
    assert copied.exit_code == 0, copied.output
    assert "copied 8 run(s), 25 event(s)" in copied.stdout
    assert SECRET not in copied.output

    table = cli("info", "--url", url)
    assert table.exit_code == 0, table.output
    assert "postgresql (psycopg)" in table.stdout and "***" in table.stdout
    assert SECRET not in table.output
    info = json.loads(cli("info", "--url", url, "--json").stdout)
    assert info["runs"] == 8 and info["events"] == 25 and info["atHead"] is True
    assert SECRET not in info["database"] and "***" in info["database"]

    for command in (["runs"], ["verify"], ["export"], ["show", "nope"]):
        result = cli(*command, "--url", url)
        assert SECRET not in result.output, command


def test_unreachable_server_error_is_scrubbed(cli: Any) -> None:
    url = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=2"
    result = cli("info", "--url", url)
    assert result.exit_code == 3, result.output
    # (the code is run-store-write-failed today: failures.translate_database_error does not
    # recognise a refused PostgreSQL connection, which has no SQLSTATE; reported)
    assert result.stderr.startswith("error: run-store-")
    assert "Traceback" not in result.output
    assert SECRET not in result.output


def test_scrub_masks_urls_it_was_told_about_and_any_other() -> None:
    url = "postgresql+psycopg://app:hunter22@db/cadence"
    text = f"could not connect with {url} (password hunter22 rejected)"
    cleaned = scrub(text, [url])
    assert "hunter22" not in cleaned
    assert "postgresql+psycopg://app:***@db/cadence" in cleaned
    stranger = scrub("see mysql://root:topsecret@host/x and 'postgresql://u:p%40ss@h/d'")
    assert "topsecret" not in stranger and "p%40ss" not in stranger
    encoded = "postgresql://u:p%40ssword@h/d"
    assert "p@ssword" not in scrub("auth failed: p@ssword", [encoded])
    # a password too short to search for safely: the whole text is withheld
    assert "ab" not in scrub("tab: ab", ["postgresql://u:ab@h/d"]).replace("withheld", "")


def test_error_lines_scrub_details() -> None:
    url = "postgresql+psycopg://app:hunter22@db/cadence"
    error = StoreUnavailableError("run-store-unavailable", f"engine {url} refused")
    lines = error_lines(error, [url])
    assert lines[0] == "error: run-store-unavailable"
    assert all("hunter22" not in line for line in lines)
    assert 2 <= len(lines) <= 3
