"""Shared pytest plumbing for the cadence-store test suite.

Sections (add new fixtures to the matching section, or a new one at the end):

0. A hermetic environment            (HOME, XDG_*, CADENCE_STORE_*)
1. Command-line options and markers  (--slow)
2. PostgreSQL                        (postgres_url, pg_database_url,
                                      pg_module_database_url)
3. SQLite                            (sqlite_database_url)
   Both: head_copies (a test whose fixtures include it gets its database as a copy of
   one the session brought to head, instead of an empty one)
4. Both engines                      (database_url: every test taking it runs on
                                      "sqlite" and "postgresql")

The store fixtures built on ``database_url`` (clock, store_url, store, db, snapshot,
rejected, ...) live in the plugin tests/store_fixtures.py.

PostgreSQL comes from a private throwaway cluster (tests/pg_cluster.py), started
once per test session (once per xdist worker) and only if a test asks for it.
Set CADENCE_TEST_PG_URL to use an existing server instead.  Without PostgreSQL
binaries the postgres tests are skipped locally, but FAIL when CI=true.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

import cadence_store

_TESTS_DIR = Path(__file__).resolve().parent
if str(_TESTS_DIR) not in sys.path:  # also works under --import-mode=importlib
    sys.path.insert(0, str(_TESTS_DIR))

from pg_cluster import pg_available, throwaway_cluster  # noqa: E402

# --------------------------------------------------------------------------
# 0. A hermetic environment: no test sees the caller's HOME, XDG_* or
#    CADENCE_STORE_* (a developer's XDG_STATE_HOME or CADENCE_STORE_SCHEMA would
#    otherwise change which store a command opens). Done at import, so every
#    xdist worker and every subprocess a test starts inherits it.
# --------------------------------------------------------------------------

HERMETIC_PREFIXES = ("XDG_", "CADENCE_STORE_")


def _hermetic_environment() -> None:
    for key in [key for key in os.environ if key.startswith(HERMETIC_PREFIXES)]:
        del os.environ[key]
    home = Path(tempfile.mkdtemp(prefix="cadence-test-home-"))
    os.environ["HOME"] = str(home)  # a test that needs a home sets its own below it
    atexit.register(shutil.rmtree, home, ignore_errors=True)


_hermetic_environment()

# clock, store_url, run_store/store, db, table_rows, snapshot, rejected
pytest_plugins = ["store_fixtures"]

# --------------------------------------------------------------------------
# 1. Command-line options and markers
#    (markers `postgres` and `slow` are declared in pyproject.toml)
# --------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="also run tests marked 'slow' (crash and fuzz campaigns)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow test: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


# --------------------------------------------------------------------------
# 2. PostgreSQL
# --------------------------------------------------------------------------


def _running_under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


def _psycopg_url(url: str) -> str:
    """Force the psycopg 3 driver (a bare postgresql:// would mean psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of the session's PostgreSQL server (database cadence_test).

    Prefer ``pg_database_url`` in tests: it gives each test its own database.
    """
    external = os.environ.get("CADENCE_TEST_PG_URL")
    if external:
        yield _psycopg_url(external)
        return
    ok, reason = pg_available()
    if not ok:
        if _running_under_ci():
            pytest.fail(f"PostgreSQL is required under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    # fsync off: every test that needs a database creates one, and each DROP DATABASE
    # forces a checkpoint, which with fsync on waits for the disk (most of a second on
    # this machine). No test crashes the operating system; a killed server process
    # loses nothing that fsync would have kept (the written pages are the kernel's).
    with throwaway_cluster(fsync=False) as url:
        yield url


@pytest.fixture(scope="session")
def _pg_admin_engine(postgres_url: str) -> Iterator[Engine]:
    """AUTOCOMMIT engine on the ``postgres`` maintenance database."""
    admin_url = make_url(postgres_url).set(database="postgres")
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_size=1)
    yield engine
    engine.dispose()


@contextmanager
def _fresh_pg_database(
    postgres_url: str, admin_engine: Engine, template: str | None = None
) -> Iterator[str]:
    name = f"t_{secrets.token_hex(8)}"
    create = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    with admin_engine.connect() as conn:
        conn.execute(text(create))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def head_copies() -> set[str]:
    """The URLs `pg_database_url` and `sqlite_database_url` made as copies of a database
    at head. A test whose fixtures include this one (the shared `store_url` does) gets
    such a copy instead of an empty database: `cadence_store.upgrade` runs once per
    session (per xdist worker) on each engine, not once per test."""
    return set()


def _wants_head_copy(request: pytest.FixtureRequest) -> bool:
    return "head_copies" in request.fixturenames


@pytest.fixture(scope="session")
def _pg_head_template(postgres_url: str, _pg_admin_engine: Engine) -> Iterator[str]:
    """Name of a database at head that `pg_database_url` copies (CREATE DATABASE ...
    TEMPLATE), closed to connections once upgraded: a copy needs it to have none (and
    autovacuum leaves such a database alone)."""
    with _fresh_pg_database(postgres_url, _pg_admin_engine) as url:
        cadence_store.upgrade(url)
        name = make_url(url).database
        with _pg_admin_engine.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
        yield str(name)


@pytest.fixture
def pg_database_url(
    request: pytest.FixtureRequest, postgres_url: str, _pg_admin_engine: Engine
) -> Iterator[str]:
    """URL of a fresh PostgreSQL database, dropped (WITH FORCE) after the test: empty, or
    a copy of one at head when the test's fixtures include `head_copies`."""
    template = request.getfixturevalue("_pg_head_template") if _wants_head_copy(request) else None
    with _fresh_pg_database(postgres_url, _pg_admin_engine, template) as url:
        if template is not None:
            request.getfixturevalue("head_copies").add(url)
        yield url


@pytest.fixture(scope="module")
def pg_module_database_url(postgres_url: str, _pg_admin_engine: Engine) -> Iterator[str]:
    """URL of a fresh PostgreSQL database shared by one module's tests (each test keeps
    to rows of its own), dropped after the module."""
    with _fresh_pg_database(postgres_url, _pg_admin_engine) as url:
        yield url


# --------------------------------------------------------------------------
# 3. SQLite
# --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _sqlite_head_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file at head that `sqlite_database_url` copies (WAL mode is kept in
    the file's header; the upgrade's engine is closed, so no -wal file is left)."""
    path = tmp_path_factory.mktemp("head-template") / "store.sqlite3"
    cadence_store.upgrade(f"sqlite:///{path}")
    leftovers = [p.name for p in path.parent.iterdir() if p != path]
    assert not leftovers, f"the template's upgrade left {leftovers}"
    return path


@pytest.fixture
def sqlite_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a fresh SQLite database file in the test's tmp_path: no file yet, or a copy
    of one at head when the test's fixtures include `head_copies`."""
    path = tmp_path / "store.sqlite3"
    url = f"sqlite:///{path}"
    if _wants_head_copy(request):
        shutil.copyfile(request.getfixturevalue("_sqlite_head_template"), path)
        request.getfixturevalue("head_copies").add(url)
    return url


# --------------------------------------------------------------------------
# 4. Both engines: one behavioural suite, two engines
# --------------------------------------------------------------------------


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def database_url(request: pytest.FixtureRequest) -> str:
    """Fresh database URL; tests using it run once per engine (ids sqlite/postgresql)."""
    fixture = {"sqlite": "sqlite_database_url", "postgresql": "pg_database_url"}[request.param]
    url: str = request.getfixturevalue(fixture)
    return url
