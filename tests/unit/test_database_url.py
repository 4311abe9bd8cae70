"""Database URLs as operators write them: multi-host forms, typed query parameters."""

from __future__ import annotations

import pytest

from cadence_store import InvalidInputError, RunStore
from cadence_store.storage.database_url import driver_options
from cadence_store.storage.engine import create_store_engine, masked_url, parse_url

PG_AUTOCTL_URI = (
    "postgres://autoctl@127.0.0.1:5501,127.0.0.1:5502/cadence"
    "?target_session_attrs=read-write&sslmode=prefer"
)


def test_the_url_pg_autoctl_prints_becomes_one_host_parameter_per_host() -> None:
    url = parse_url(PG_AUTOCTL_URI)
    assert url.drivername == "postgresql+psycopg"
    assert url.username == "autoctl" and url.database == "cadence"
    assert url.query["host"] == ("127.0.0.1:5501", "127.0.0.1:5502")
    assert url.query["target_session_attrs"] == "read-write"


@pytest.mark.parametrize(
    "given",
    [
        "postgresql+psycopg://u:secret@h1:1,h2:2/db",
        "postgresql://u:secret@h1:1,h2:2/db",
        "postgres://u:secret@h1,h2:2/db",
    ],
)
def test_libpq_multi_host_forms_are_accepted(given: str) -> None:
    url = parse_url(given)
    assert url.get_driver_name() == "psycopg"
    assert len(url.query["host"]) == 2
    assert "secret" not in masked_url(given)  # the password stays hidden in messages


def test_a_single_host_url_is_left_as_it_was() -> None:
    assert (
        str(parse_url("postgresql+psycopg://u@db:5432/app")) == "postgresql+psycopg://u@db:5432/app"
    )


def test_query_parameters_reach_psycopg_with_their_types() -> None:
    url, arguments = driver_options(
        parse_url("postgresql+psycopg://u@db/app?prepare_threshold=0&connect_timeout=5")
    )
    assert arguments == {"prepare_threshold": 0}
    assert "prepare_threshold" not in url.query and url.query["connect_timeout"] == "5"
    _, none = driver_options(parse_url("postgresql+psycopg://u@db/app?prepare_threshold=none"))
    assert none == {"prepare_threshold": None}


@pytest.mark.parametrize(
    "query",
    [
        "prepare_threshold=soon",
        "prepare_threshold=-1",
        "connect_timeout=abc",
        "sslmode=maybe",
        "target_session_attrs=writable",
        "no_such_option=1",
        "connect_timeout=1&connect_timeout=2",
    ],
)
def test_a_bad_query_parameter_is_a_coded_error_before_anything_connects(query: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        RunStore(f"postgresql+psycopg://u@127.0.0.1:1/app?{query}")
    assert caught.value.code == "invalid-database-url"


@pytest.mark.parametrize("timeout", ["abc", "-1", "nan"])
def test_a_bad_sqlite_timeout_is_a_coded_error(tmp_path: object, timeout: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        create_store_engine(f"sqlite:///{tmp_path}/x.sqlite3?timeout={timeout}")
    assert caught.value.code == "invalid-database-url"
