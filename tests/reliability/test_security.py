"""Issue 7: the journal keeps its files private, its SQL parameterised, its passwords secret,
and one run's data out of another run's rows.

1. Permissions (SQLite state root): the database and its ``-wal`` / ``-shm`` are 0600 and
   the state directories 0700 after every write path that can create them — even under
   ``umask 000`` and over loose pre-existing modes — including ``cadence-store demo`` run
   with HOME / XDG_STATE_HOME in temporary directories.
2. Symlinked state components are refused (``state-component-symlink``), the database
   file itself included, and nothing is written through the link.
3. No SQL is built by string formatting with caller data: an ``ast`` scan of
   ``cadence_store/**/*.py`` (and the packaged ``migrations/``) lists every dynamic SQL
   string and must equal a reviewed allowlist.
4. Passwords in PostgreSQL URLs never appear in errors, log records or CLI output.
5. An outcome object or a pause code (or a run id) carrying SQL or another run's id
   never changes another run: its rows stay byte-identical.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import re
import stat
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

import cadence_store
from cadence_store import CadenceStoreError, RunStore, StateRootError
from cadence_store.cli import main
from cadence_store.storage.feed_notifier import flush_notifiers
from cadence_store.store.state_root import resolve_state_root

ROOT_HASH = "ab" * 32
A, B, C = "a" * 64, "b" * 64, "c" * 64
REPO = Path(__file__).resolve().parents[2]

# -- 1. permissions ------------------------------------------------------------------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 000: whatever is created private is private on purpose, not by inheritance."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def consumer(tmp_path: Path) -> Path:
    path = tmp_path / "consumer"
    path.mkdir()
    return path


@pytest.fixture
def state_home(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def private_tree_problems(product_root: str | Path) -> list[str]:
    """Every directory under the product root 0700, every file 0600, no links."""
    problems = []
    root = Path(product_root)
    assert root.is_dir()
    for path in [root, *root.rglob("*")]:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            problems.append(f"{path}: symlink")
        elif stat.S_ISDIR(info.st_mode) and mode(path) != 0o700:
            problems.append(f"{path}: directory {oct(mode(path))}")
        elif stat.S_ISREG(info.st_mode) and mode(path) != 0o600:
            problems.append(f"{path}: file {oct(mode(path))}")
    return problems


def database_files(database_path: str) -> list[str]:
    return [
        path
        for path in (database_path, f"{database_path}-wal", f"{database_path}-shm")
        if os.path.exists(path)
    ]


def test_every_write_path_keeps_the_state_root_private(
    open_umask: None, consumer: Path, state_home: Path
) -> None:
    root = resolve_state_root(consumer, xdg_state_home=str(state_home))
    seen_wal = False

    def check(step: str) -> None:
        nonlocal seen_wal
        problems = private_tree_problems(root.product_root)
        assert not problems, (step, problems)
        files = database_files(root.database_path)
        assert root.database_path in files, step
        seen_wal = seen_wal or f"{root.database_path}-wal" in files

    clock = iter(range(1_000, 10**9, 1_000))
    store = RunStore.open(root, clock=lambda: next(clock))
    check("open")
    run = store.start_run("abel-implement", change="private", operation_id="s1")
    check("start_run")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
    check("bind_delivery")
    store.transition(run.run_id, "validating-delivery", operation_id="t1")
    check("transition")
    lease = store.acquire_lease(run.run_id, "apply", 60_000)
    store.commit_lease(lease, {"ok": True})
    check("commit_lease")
    store.recover_expired_leases()
    store.close()
    check("close")
    assert seen_wal, "the WAL file was never there to check"
    with RunStore.open(root) as again:
        assert again.verify_integrity(run.run_id).sequence == 3
        check("reopen")
    check("close again")


def test_loose_pre_existing_modes_are_tightened(
    open_umask: None, consumer: Path, state_home: Path
) -> None:
    root = resolve_state_root(consumer, xdg_state_home=str(state_home))
    for directory in (root.product_root, root.roots_dir, root.root_dir):
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o777)
    Path(root.database_path).touch()
    os.chmod(root.database_path, 0o666)
    with RunStore.open(root) as store:
        store.start_run("abel-implement", change="tightened", operation_id="s1")
        assert not private_tree_problems(root.product_root)
    assert not private_tree_problems(root.product_root)


@pytest.mark.parametrize(
    "command", [["demo"], ["upgrade"], ["info"], ["runs"], ["verify"]], ids=" ".join
)
def test_the_command_line_keeps_the_default_store_private(
    open_umask: None,
    consumer: Path,
    state_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(consumer)
    monkeypatch.delenv("CADENCE_STORE_URL", raising=False)
    env = {"HOME": str(home), "XDG_STATE_HOME": str(state_home), "CADENCE_STORE_URL": None}
    if command in (["info"], ["runs"], ["verify"]):  # read-only: they create no store
        refused = CliRunner().invoke(main, command, env=env)
        assert refused.exit_code == 3 and "no embedded store exists yet" in refused.stderr
        assert not (state_home / "abel-cadence").exists()
        assert CliRunner().invoke(main, ["upgrade"], env=env).exit_code == 0
    result = CliRunner().invoke(main, command, env=env)
    assert result.exit_code == 0, result.output
    product_root = state_home / "abel-cadence"
    assert not private_tree_problems(product_root)
    assert list(product_root.rglob("control.sqlite3")), "the default store was not used"
    assert list(consumer.iterdir()) == [], "something was written into the consumer root"
    assert list(home.iterdir()) == [], "HOME was used although XDG_STATE_HOME is set"


def test_demo_under_home_without_xdg_state_home(
    open_umask: None, consumer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(consumer)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("CADENCE_STORE_URL", raising=False)
    monkeypatch.setenv("HOME", str(home))
    result = CliRunner().invoke(main, ["demo"], env={"HOME": str(home)})
    assert result.exit_code == 0, result.output
    product_root = home / ".local" / "state" / "abel-cadence"
    assert not private_tree_problems(product_root)
    assert list(product_root.rglob("control.sqlite3"))


# -- 2. symlinks ---------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prepared(consumer: Path, state_home: Path) -> Any:
    root = resolve_state_root(consumer, xdg_state_home=str(state_home))
    RunStore.open(root).close()
    for path in database_files(root.database_path):
        os.remove(path)
    return root


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-file", "dangling"])
def test_a_symlinked_database_file_is_refused(
    consumer: Path, state_home: Path, tmp_path: Path, target_exists: bool
) -> None:
    root = _prepared(consumer, state_home)
    target = tmp_path / "elsewhere.sqlite3"
    if target_exists:
        target.write_bytes(b"someone else's bytes")
        digest = _sha256(target)
    os.symlink(target, root.database_path)
    with pytest.raises(StateRootError) as info:
        RunStore.open(root)
    assert info.value.code == "state-component-symlink"
    if target_exists:
        assert _sha256(target) == digest
    else:
        assert not target.exists(), "the store created the link's target"
    assert not os.path.exists(f"{target}-wal") and not os.path.exists(f"{target}-shm")


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_symlinked_wal_or_shm_file_is_refused(
    consumer: Path, state_home: Path, tmp_path: Path, suffix: str
) -> None:
    root = resolve_state_root(consumer, xdg_state_home=str(state_home))
    with RunStore.open(root) as store:
        store.start_run("abel-implement", change="linked", operation_id="s1")
    target = tmp_path / f"elsewhere{suffix}"
    target.write_bytes(b"x")
    for path in database_files(root.database_path)[1:]:
        os.remove(path)
    os.symlink(target, f"{root.database_path}{suffix}")
    with pytest.raises(StateRootError) as info:
        RunStore.open(root)
    assert info.value.code == "state-component-symlink"
    assert target.read_bytes() == b"x"


@pytest.mark.parametrize(
    "component", ["product_root", "roots_dir", "root_dir", "artifacts_dir", "state_base"]
)
def test_a_symlinked_directory_component_is_refused(
    consumer: Path, state_home: Path, tmp_path: Path, component: str
) -> None:
    if component == "state_base":
        real = tmp_path / "real-state"
        real.mkdir()
        linked = tmp_path / "linked-state"
        os.symlink(real, linked)
        with pytest.raises(StateRootError) as info:
            RunStore.open(resolve_state_root(consumer, xdg_state_home=str(linked)))
        assert info.value.code == "state-component-symlink"
        assert list(real.iterdir()) == []
        return
    root = resolve_state_root(consumer, xdg_state_home=str(state_home))
    path = Path(getattr(root, component))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, path)
    with pytest.raises(StateRootError) as info:
        RunStore.open(resolve_state_root(consumer, xdg_state_home=str(state_home)))
    assert info.value.code == "state-component-symlink"
    assert list(elsewhere.iterdir()) == [], "something was created through the link"


def test_the_command_line_refuses_a_symlinked_database(
    consumer: Path, state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _prepared(consumer, state_home)
    target = tmp_path / "elsewhere.sqlite3"
    target.write_bytes(b"")
    os.symlink(target, root.database_path)
    monkeypatch.chdir(consumer)
    monkeypatch.delenv("CADENCE_STORE_URL", raising=False)
    result = CliRunner().invoke(main, ["demo"], env={"XDG_STATE_HOME": str(state_home)})
    assert result.exit_code == 3, result.output
    assert "state-component-symlink" in result.output
    assert "Traceback" not in result.output
    assert target.read_bytes() == b""


# -- 3. no SQL built from caller data ------------------------------------------------------------

_SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|PRAGMA|CREATE|DROP|ALTER|SET|BEGIN|WITH|ATTACH|DETACH|"
    r"VACUUM|REINDEX|ANALYZE|SAVEPOINT|RELEASE|ROLLBACK|COMMIT|TRUNCATE|GRANT|REVOKE|LOCK|COPY|"
    r"EXPLAIN|REPLACE|MERGE|CALL|DO|NOTIFY|LISTEN|SHOW|RESET|DISCARD|COMMENT)\b",
    re.IGNORECASE,
)
# callables that take SQL text as their first argument (`query` is legacy.Query)
_SQL_SINKS = {"execute", "exec_driver_sql", "executescript", "executemany", "text", "query"}

# Reviewed: every dynamic SQL string in the package, and why it is safe.
REVIEWED_DYNAMIC_SQL = {
    # PRAGMA table_info / index_list / index_xinfo / foreign_key_list on a table or index
    # name from sqlite_master or the fixed table lists, through sqlite_pragmas.quote
    # (doubled quotes)
    ("cadence_store/storage/sqlite_pragmas.py", "columns"),
    ("cadence_store/storage/sqlite_pragmas.py", "indexes"),
    ("cadence_store/storage/sqlite_pragmas.py", "index_keys"),
    ("cadence_store/storage/sqlite_pragmas.py", "foreign_keys"),
    ("cadence_store/storage/sqlite_pragmas.py", "foreign_key_rows"),
    # the receipt-sequence fill of revision cs0005: every piece of its text is a constant
    # of the revision (the journal's receipt kinds, fixed SQL), nothing from outside
    ("migrations/versions/cs0005_receipt_sequence.py", "_fill_in_sql"),
    # the follower name's advisory lock: an int the module computes (sha256 of the name)
    ("cadence_store/storage/follower_names.py", "FollowerNameHold._try_server_lock"),
    # CREATE/DROP DATABASE of a name the testing plugin makes itself (secrets.token_hex)
    ("cadence_store/testing.py", "_fresh_postgresql_database"),
    # CREATE SCHEMA / SET LOCAL search_path on a schema name checked against
    # [A-Za-z_][A-Za-z0-9_]{0,62} and quoted by the dialect's identifier preparer
    ("cadence_store/storage/backends/postgresql.py", "PostgreSQLBackend.lock_migration"),
    # the pg_catalog queries, put together from the module's own fixed fragments (the
    # schema and the table names are bound parameters)
    ("cadence_store/storage/backends/postgresql_catalogue.py", "<module>"),
}


def _module_constants(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return names


def _literal(node: ast.AST) -> str:
    """The literal text a string expression starts with ('' if none)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return _literal(node.left) or _literal(node.right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        return _literal(node.func.value)
    return ""


def _interpolated(node: ast.AST) -> list[ast.expr] | None:
    """What a dynamically built string interpolates (None: not built dynamically)."""
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _literal(node.left):
        return [node.right]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        if not (_literal(node.left) or _literal(node.right)):
            return None
        parts: list[ast.expr] = []
        for side in (node.left, node.right):
            inner = _interpolated(side)
            if inner is not None:
                parts += inner
            elif not isinstance(side, ast.Constant):
                parts.append(side)
        return parts
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and _literal(node.func.value)
    ):
        return [*node.args, *(k.value for k in node.keywords)]
    return None


class _DynamicSql(ast.NodeVisitor):
    def __init__(self, path: str, constants: set[str]) -> None:
        self.path, self.constants = path, constants
        self.scope: list[str] = []
        self.found: list[tuple[str, str, int]] = []

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

    def _only_constants(self, parts: list[ast.expr]) -> bool:
        for part in parts:
            for sub in ast.walk(part):
                if isinstance(sub, ast.Name) and sub.id not in self.constants:
                    return False
                if isinstance(sub, ast.Call | ast.Attribute | ast.Subscript):
                    return False
        return True

    def _check(self, node: ast.AST) -> None:
        parts = _interpolated(node)
        if parts is not None and not self._only_constants(parts):
            function = ".".join(self.scope) or "<module>"
            self.found.append((self.path, function, getattr(node, "lineno", 0)))

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        name = name or (node.func.id if isinstance(node.func, ast.Name) else None)
        if name in _SQL_SINKS and node.args:
            self._check(node.args[0])
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if _SQL_START.match(_literal(node)):
            self._check(node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if _SQL_START.match(_literal(node)):
            self._check(node)
        self.generic_visit(node)


def dynamic_sql(source: str, path: str = "<source>") -> set[tuple[str, str]]:
    tree = ast.parse(source, path)
    finder = _DynamicSql(path, _module_constants(tree))
    finder.visit(tree)
    return {(file, function) for file, function, _ in finder.found}


def test_the_scanner_finds_sql_built_from_data() -> None:
    flagged = dynamic_sql(
        "LIMIT = 5\n"
        "def a(conn, run_id):\n"
        "    conn.execute(text(f\"SELECT * FROM runs WHERE run_id = '{run_id}'\"))\n"
        "def b(cur, x):\n"
        "    cur.execute('DELETE FROM runs WHERE id = %s' % x)\n"
        "def c(conn, x):\n"
        "    conn.exec_driver_sql('UPDATE runs SET state = {}'.format(x))\n"
        "def d(conn, x):\n"
        "    sql = 'SELECT * FROM runs WHERE state = ' + x\n"
        "    conn.execute(sql)\n"
        "def e(query, table):\n"
        "    query(f'PRAGMA table_info({table})', ())\n"
        "class K:\n"
        "    def f(self, x):\n"
        "        statement = f'INSERT INTO t VALUES ({x.value})'\n"
        "def fine(conn, run_id):\n"
        "    conn.execute(text('SELECT * FROM runs WHERE run_id = :r'), {'r': run_id})\n"
        "    conn.exec_driver_sql(f'PRAGMA busy_timeout = {LIMIT}')\n"
        "    message = f'run {run_id} not found'\n"
    )
    assert flagged == {
        ("<source>", "a"),
        ("<source>", "b"),
        ("<source>", "c"),
        ("<source>", "d"),
        ("<source>", "e"),
        ("<source>", "K.f"),
    }


def test_no_sql_is_built_from_caller_data() -> None:
    found: set[tuple[str, str]] = set()
    sources = sorted((REPO / "cadence_store").rglob("*.py"))
    sources += sorted((REPO / "migrations").rglob("*.py"))  # shipped inside the wheel
    assert len(sources) > 10
    for path in sources:
        found |= dynamic_sql(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())
    unreviewed = sorted(found - REVIEWED_DYNAMIC_SQL)
    assert not unreviewed, (
        "SQL built by string formatting: bind the values as parameters, or review the "
        f"identifier quoting and add it to REVIEWED_DYNAMIC_SQL: {unreviewed}"
    )
    assert found == REVIEWED_DYNAMIC_SQL, (
        f"stale allowlist entries (remove them): {sorted(REVIEWED_DYNAMIC_SQL - found)}"
    )


# -- 4. passwords --------------------------------------------------------------------------------

PASSWORDS = ["Pw-s3cret-9f7c2", "p@ss:w/rd%41;x"]


def _with_password(url: str, password: str, **changes: Any) -> str:
    return make_url(url).set(password=password, **changes).render_as_string(hide_password=False)


def _leaks(text_: str, password: str) -> bool:
    forms = {password, quote(password, safe=""), quote(password)}
    return any(form in text_ for form in forms)


def _error_text(error: BaseException) -> str:
    return "\n".join(
        [str(error), repr(error), *map(str, error.args), *traceback.format_exception(error)]
    )


def _bad_urls(pg_url: str, password: str) -> dict[str, str]:
    return {
        "wrong-database": _with_password(pg_url, password, database="no_such_database"),
        "wrong-port": _with_password(
            pg_url,
            password,
            host="127.0.0.1",
            port=1,
            query={"connect_timeout": "2"},
        ),
    }


@pytest.mark.postgres
@pytest.mark.parametrize("password", PASSWORDS, ids=["plain", "special-chars"])
def test_errors_never_carry_the_password(pg_database_url: str, password: str) -> None:
    good = _with_password(pg_database_url, password)
    # not at head yet: the message names the upgrade command, with the password masked
    with pytest.raises(CadenceStoreError) as info:
        RunStore(good, root_hash=ROOT_HASH)
    assert info.value.code == "run-store-upgrade-required"
    assert "cadence-store upgrade --url" in str(info.value)
    assert not _leaks(_error_text(info.value), password)
    assert not _leaks(getattr(info.value, "command", ""), password)
    for name, url in _bad_urls(pg_database_url, password).items():
        with pytest.raises(CadenceStoreError) as info:
            RunStore(url, root_hash=ROOT_HASH)
        assert info.value.code.startswith("run-store-"), name
        assert not _leaks(_error_text(info.value), password), name
        # upgrade() raises a coded error too, and it must not carry the password either
        with pytest.raises(CadenceStoreError) as raised:
            cadence_store.upgrade(url)
        assert not _leaks(_error_text(raised.value), password), name


@pytest.mark.postgres
def test_upgrade_of_an_unreachable_database_is_a_coded_error(pg_database_url: str) -> None:
    for name, url in _bad_urls(pg_database_url, PASSWORDS[0]).items():
        with pytest.raises(CadenceStoreError) as info:
            cadence_store.upgrade(url)
        assert info.value.code == "run-store-unavailable", name


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        lines = []
        for record in self.records:
            lines.append(formatter.format(record))  # message, args and exc_info
            lines.append(repr(record.args))
            lines.append(repr(record.__dict__.get("url", "")))
        return "\n".join(lines)


@pytest.fixture
def debug_logs() -> Iterator[_Capture]:
    capture = _Capture()
    names = ("sqlalchemy", "cadence_store", "alembic")
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(capture)
    try:
        yield capture
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(capture)
            logging.getLogger(name).setLevel(saved[name])


@pytest.mark.postgres
def test_debug_logs_never_carry_the_password(pg_database_url: str, debug_logs: _Capture) -> None:
    password = PASSWORDS[1]
    good = _with_password(pg_database_url, password)
    cadence_store.upgrade(good)
    with RunStore(good, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="logged", operation_id="s1")
        store.verify_integrity(run.run_id)
    for url in _bad_urls(pg_database_url, password).values():
        with pytest.raises(Exception):
            RunStore(url, root_hash=ROOT_HASH)
        with pytest.raises(Exception):
            cadence_store.upgrade(url)
    logged = debug_logs.text()
    assert len(debug_logs.records) > 50, "DEBUG logging was not captured"
    assert "CREATE TABLE" in logged  # the upgrade itself was logged
    assert not _leaks(logged, password)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "command",
    [["upgrade"], ["info"], ["info", "--json"], ["runs"], ["verify"], ["export"], ["demo"]],
    ids=" ".join,
)
def test_command_output_never_carries_the_password(pg_database_url: str, command: list[str]):
    password = PASSWORDS[1]
    runner = CliRunner()
    good = _with_password(pg_database_url, password)
    if command != ["upgrade"]:
        cadence_store.upgrade(good)
    urls = {**_bad_urls(pg_database_url, password), "good": good}
    for name, url in urls.items():
        result = runner.invoke(main, [*command, "--url", url], env={"CADENCE_STORE_URL": None})
        everything = result.output + (str(result.exception) if result.exception else "")
        assert not _leaks(everything, password), (name, everything)
        assert "Traceback" not in result.output, (name, result.output)
        if name != "good":
            assert result.exit_code == 3, (name, result.output)
        elif command[0] in ("upgrade", "info", "demo"):
            assert result.exit_code == 0, result.output
            assert "***" in result.output  # the URL is shown, masked
    # the same with the URL in the environment instead of on the command line
    result = runner.invoke(main, command, env={"CADENCE_STORE_URL": urls["wrong-database"]})
    assert not _leaks(result.output, password)


# -- 5. one run's data never reaches another run's rows -----------------------------------------

INJECTIONS = [
    "x' WHERE 1=1; --",
    "'; UPDATE runs SET state = 'completed'; --",
    "'; DELETE FROM events; --",
    '"); DROP TABLE runs; --',
    "%(run_id)s",
    ":run_id",
    "?",
    "$1",
]


def _rows_of(engine: Engine, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    flush_notifiers()  # PostgreSQL numbers the feed just after each commit
    queries = {
        "runs": "SELECT * FROM runs WHERE run_id = :r",
        "events": "SELECT * FROM events WHERE run_id = :r ORDER BY sequence",
        "operations": "SELECT * FROM operations WHERE run_id = :r ORDER BY operation_id",
        "delivery_bindings": (
            "SELECT * FROM delivery_bindings WHERE run_id = :r ORDER BY gate, revision"
        ),
    }
    with engine.connect() as connection:
        return {
            name: [tuple(row) for row in connection.execute(text(sql), {"r": run_id})]
            for name, sql in queries.items()
        }


def test_outcomes_pause_codes_and_run_ids_never_touch_another_run(database_url: str) -> None:
    cadence_store.upgrade(database_url)
    reader = create_engine(database_url)
    try:
        with RunStore(database_url, root_hash=ROOT_HASH, clock=lambda: 5_000) as store:
            victim = store.start_run("abel-implement", change="victim", operation_id="v1")
            store.bind_delivery(victim.run_id, "gate-a", 1, A, operation_id="v2")
            store.transition(victim.run_id, "paused", operation_id="v3", code="victim-code")
            victim_lease = store.acquire_lease(victim.run_id, "v-apply", 60_000)
            store.commit_lease(victim_lease, {"victim": True})
            running = store.acquire_lease(victim.run_id, "v-running", 60_000)
            before = _rows_of(reader, victim.run_id)
            v = victim.run_id

            actor = store.start_run("abel-implement", change="actor", operation_id="a1")
            for i, code in enumerate([*INJECTIONS, v, f"{v}' OR run_id = '{v}"]):
                moved = store.transition(actor.run_id, "paused", operation_id=f"a-t{i}", code=code)
                assert moved.pause_code == code
                assert store.status(actor.run_id).pause_code == code  # stored as data
                lease = store.acquire_lease(actor.run_id, f"a-l{i}", 60_000)
                outcome = {
                    "runId": v,
                    "run_id": v,
                    "sql": code,
                    "state": "completed",
                    "lease_token": running.token,
                    "nested": {"operation_id": "v-running", "token": running.token},
                }
                assert store.commit_lease(lease, outcome) == outcome
            # run ids carrying SQL aimed at the victim
            for i, forged in enumerate(
                [f"{v}' OR '1'='1", f"{v}'; --", f"' OR run_id = '{v}", "%", "_" * 36]
            ):
                for call in (
                    lambda f=forged: store.status(f),
                    lambda f=forged, i=i: store.transition(f, "completed", operation_id=f"x{i}"),
                    lambda f=forged, i=i: store.bind_delivery(
                        f, "gate-a", 1, B, operation_id=f"y{i}"
                    ),
                    lambda f=forged: store.acquire_lease(f, "v-running", 1_000, preempt=True),
                    lambda f=forged: store.inspect_operation(f, "v-running"),
                ):
                    with pytest.raises(CadenceStoreError) as info:
                        call()
                    assert info.value.code == "run-not-found"
            # a lease naming the victim's operation with a forged token is fenced
            forged_lease = running.model_copy(update={"token": f"{running.token}' OR '1'='1"})
            with pytest.raises(CadenceStoreError) as info:
                store.commit_lease(forged_lease, {"stolen": True})
            assert info.value.code == "lease-fenced"

            assert _rows_of(reader, v) == before, "another run's rows changed"
            assert store.verify_integrity(v).to_json() == store.status(v).to_json()
            assert store.verify_integrity(actor.run_id).sequence == len(INJECTIONS) + 3
            store.assert_lease(running)  # the victim's live lease is untouched
    finally:
        reader.dispose()
