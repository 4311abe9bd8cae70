"""The owner-private state root of cadence 1.x and `RunStore.open` on it (issue 3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from integration.conftest_migrations import (
    VERSION_TABLE,
    copy_fixture,
    manifest,
    query,
    store_entry,
    table_names,
    version_rows,
)

from cadence_store import RunStore, StateRootError
from cadence_store.cli import main
from cadence_store.storage.schema import head_revision
from cadence_store.store.state_root import StateRoot, prepare_state_root, resolve_state_root


def _hash(path: Path | str) -> str:
    return hashlib.sha256(os.path.realpath(path).encode("utf-8")).hexdigest()


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def consumer(tmp_path: Path) -> Path:
    directory = tmp_path / "work" / "consumer project"
    directory.mkdir(parents=True)
    return directory


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask: the 0700/0600 modes must come from the library, not the umask."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


# ---------------------------------------------------------------------------------------------
# resolve_state_root
# ---------------------------------------------------------------------------------------------


def test_xdg_state_home_when_absolute(consumer: Path, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    root = resolve_state_root(consumer, xdg_state_home=str(xdg), home_dir=str(tmp_path / "home"))
    expected_hash = _hash(consumer)
    assert root.consumer_root == os.path.realpath(consumer)
    assert root.consumer_root_hash == expected_hash
    assert root.root_dir == str(xdg / "abel-cadence" / "roots" / expected_hash)
    assert root.database_path == str(
        xdg / "abel-cadence" / "roots" / expected_hash / "control.sqlite3"
    )
    assert root.database_url == f"sqlite:///{root.database_path}"
    assert not xdg.exists()  # resolving creates nothing


def test_home_local_state_without_xdg(consumer: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    root = resolve_state_root(consumer, xdg_state_home="", home_dir=str(home))
    expected = home / ".local" / "state" / "abel-cadence" / "roots" / _hash(consumer)
    assert root.root_dir == str(expected)


def test_relative_xdg_falls_back_to_home(consumer: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    root = resolve_state_root(consumer, xdg_state_home="relative/state", home_dir=str(home))
    assert root.database_path == str(
        home / ".local" / "state" / "abel-cadence" / "roots" / _hash(consumer) / "control.sqlite3"
    )


def test_environment_defaults(
    consumer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "from-env"))
    root = resolve_state_root(consumer)
    assert root.root_dir == str(tmp_path / "from-env" / "abel-cadence" / "roots" / _hash(consumer))
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "env-home"))
    root = resolve_state_root(consumer)
    assert root.root_dir.startswith(str(tmp_path / "env-home" / ".local" / "state"))


def test_hash_is_of_the_real_path(consumer: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-consumer"
    link.symlink_to(consumer, target_is_directory=True)
    via_link = resolve_state_root(link, xdg_state_home=str(tmp_path / "xdg"))
    direct = resolve_state_root(consumer, xdg_state_home=str(tmp_path / "xdg"))
    assert via_link.consumer_root_hash == direct.consumer_root_hash == _hash(consumer)
    assert via_link.consumer_root == str(consumer)
    # cadence 1.x hashed the UTF-8 bytes of the real path (manifest convention).
    assert manifest()["conventions"]["rootHash"] == (
        "sha256 hex of the UTF-8 consumer root real path"
    )


def test_relative_home_is_an_invalid_state_base(consumer: Path) -> None:
    with pytest.raises(StateRootError) as caught:
        resolve_state_root(consumer, xdg_state_home="rel", home_dir="relative/home")
    assert caught.value.code == "invalid-state-base"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_unavailable_consumer_root(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "not-there"
    if kind == "file":
        target.write_text("x")
    with pytest.raises(StateRootError) as caught:
        resolve_state_root(target, xdg_state_home=str(tmp_path / "xdg"))
    assert caught.value.code == "consumer-root-unavailable"


@pytest.mark.parametrize("where", ["state-base", "product", "roots", "root"])
def test_symlinked_component_is_refused(where: str, consumer: Path, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    parts = {
        "state-base": xdg,
        "product": xdg / "abel-cadence",
        "roots": xdg / "abel-cadence" / "roots",
        "root": xdg / "abel-cadence" / "roots" / _hash(consumer),
    }
    link = parts[where]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StateRootError) as caught:
        resolve_state_root(consumer, xdg_state_home=str(xdg))
    assert caught.value.code == "state-component-symlink"


def test_symlinked_home_component_is_refused(consumer: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (home / ".local").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(StateRootError) as caught:
        resolve_state_root(consumer, xdg_state_home=None, home_dir=str(home))
    assert caught.value.code == "state-component-symlink"


@pytest.mark.parametrize("where", ["product", "roots", "root"])
def test_file_in_place_of_a_directory_is_refused(
    where: str, consumer: Path, tmp_path: Path
) -> None:
    xdg = tmp_path / "xdg"
    parts = {
        "product": xdg / "abel-cadence",
        "roots": xdg / "abel-cadence" / "roots",
        "root": xdg / "abel-cadence" / "roots" / _hash(consumer),
    }
    blocker = parts[where]
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    with pytest.raises(StateRootError) as caught:
        root = resolve_state_root(consumer, xdg_state_home=str(xdg))
        prepare_state_root(root)
    assert caught.value.code == "state-component-type"


def test_state_root_inside_the_consumer_root_is_refused(consumer: Path) -> None:
    listing = sorted(os.listdir(consumer))
    for xdg in (consumer / ".state", consumer):
        with pytest.raises(StateRootError) as caught:
            resolve_state_root(consumer, xdg_state_home=str(xdg))
        assert caught.value.code == "state-root-inside-consumer"
    with pytest.raises(StateRootError) as caught:
        resolve_state_root(consumer, xdg_state_home="", home_dir=str(consumer))
    assert caught.value.code == "state-root-inside-consumer"
    assert sorted(os.listdir(consumer)) == listing == []


# ---------------------------------------------------------------------------------------------
# RunStore.open
# ---------------------------------------------------------------------------------------------


def _root(consumer: Path, tmp_path: Path) -> StateRoot:
    return resolve_state_root(consumer, xdg_state_home=str(tmp_path / "xdg"))


def _assert_private(root: StateRoot) -> None:
    for directory in (
        root.product_root,
        root.roots_dir,
        root.root_dir,
        root.artifacts_dir,
        root.workspaces_dir,
        root.transactions_dir,
    ):
        assert _mode(directory) == 0o700, directory
    assert _mode(root.database_path) == 0o600
    for suffix in ("-wal", "-shm"):
        path = root.database_path + suffix
        if os.path.lexists(path):
            assert _mode(path) == 0o600, path


@pytest.mark.usefixtures("open_umask")
def test_open_creates_a_private_store(consumer: Path, tmp_path: Path) -> None:
    root = _root(consumer, tmp_path)
    store = RunStore.open(root, clock=lambda: 1_000)
    try:
        assert store.root_hash == _hash(consumer)
        run = store.start_run("abel-design", operation_id="s-1", change="private")
        assert run.root_hash == _hash(consumer)
        assert os.path.exists(root.database_path + "-wal")
        assert os.path.exists(root.database_path + "-shm")
        _assert_private(root)
    finally:
        store.close()
    _assert_private(root)
    assert version_rows(root.database_path) == [head_revision()]
    assert query(root.database_path, "PRAGMA journal_mode") == [{"journal_mode": "wal"}]

    # Reopening the same root: same store, same runs.
    again = RunStore.open(root, clock=lambda: 2_000)
    try:
        assert again.status(run.run_id).to_json() == run.to_json()
        _assert_private(again.state_root or root)
    finally:
        again.close()
    _assert_private(root)


def test_open_upgrades_its_own_file_from_an_older_revision(consumer: Path, tmp_path: Path) -> None:
    from cadence_store.storage import schema

    root = prepare_state_root(_root(consumer, tmp_path))
    schema.upgrade(root.database_url, "cadence1x_v4")
    assert version_rows(root.database_path) == ["cadence1x_v4"]
    RunStore.open(root).close()
    assert version_rows(root.database_path) == [head_revision()]


@pytest.mark.parametrize("file", ["legacy-v2.sqlite3", "legacy-v4.sqlite3", "current.sqlite3"])
def test_open_adopts_a_cadence1x_store_placed_there(
    file: str, consumer: Path, tmp_path: Path
) -> None:
    entry = store_entry(file)
    root = prepare_state_root(_root(consumer, tmp_path))
    copy_fixture(file, Path(root.root_dir), name="control.sqlite3")
    os.chmod(root.database_path, 0o644)

    store = RunStore.open(root, clock=lambda: entry["clock"]["endMs"])
    try:
        for run in entry["runs"]:
            status = store.status(run["runId"])
            assert status.to_json() == json.dumps(
                run["status"], separators=(",", ":"), ensure_ascii=False
            )
            store.verify_integrity(run["runId"])
    finally:
        store.close()
    assert version_rows(root.database_path) == [head_revision()]
    assert "schema_meta" not in table_names(root.database_path)
    assert VERSION_TABLE in table_names(root.database_path)
    assert _mode(root.database_path) == 0o600


def test_open_recovers_expired_leases(consumer: Path, tmp_path: Path) -> None:
    root = _root(consumer, tmp_path)
    store = RunStore.open(root, clock=lambda: 10_000)
    try:
        run = store.start_run("abel-implement", operation_id="start-l", change="leases")
        lease = store.acquire_lease(run.run_id, "lease-op", 5_000)
        assert lease.expires_at == 15_000
        assert store.inspect_operation(run.run_id, "lease-op").state == "running"
    finally:
        store.close()

    reopened = RunStore.open(root, clock=lambda: 20_000)
    try:
        # Recovered by open itself, before anyone inspected the operation.
        rows = query(
            root.database_path,
            "SELECT state, lease_token, lease_expires_at FROM operations WHERE operation_id = ?",
            ("lease-op",),
        )
        assert rows == [{"state": "interrupted", "lease_token": None, "lease_expires_at": None}]
        status = reopened.inspect_operation(run.run_id, "lease-op")
        assert status is not None
        observed = store_entry("current.sqlite3")["observations"]["recoverExpiredLeasesOnOpen"]
        # exactly cadence 1.x's object; the fence of the lease's last grant is an attribute
        assert observed == {"state": "interrupted"}
        assert status.to_dict() == observed
        assert status.fence == 1
    finally:
        reopened.close()


def test_open_keeps_a_live_lease(consumer: Path, tmp_path: Path) -> None:
    root = _root(consumer, tmp_path)
    with RunStore.open(root, clock=lambda: 10_000) as store:
        run = store.start_run("abel-implement", operation_id="start-k", change="keep")
        store.acquire_lease(run.run_id, "lease-live", 60_000)
    with RunStore.open(root, clock=lambda: 20_000) as reopened:
        status = reopened.inspect_operation(run.run_id, "lease-live")
        assert status is not None
        assert status.to_dict() == {"state": "running", "expiresAt": 70_000}
        assert status.fence == 1


def test_open_refuses_a_symlinked_database(consumer: Path, tmp_path: Path) -> None:
    root = prepare_state_root(_root(consumer, tmp_path))
    target = tmp_path / "elsewhere.sqlite3"
    target.write_bytes(b"")
    os.symlink(target, root.database_path)
    with pytest.raises(StateRootError) as caught:
        RunStore.open(root)
    assert caught.value.code == "state-component-symlink"
    assert target.read_bytes() == b""


def test_open_refuses_a_directory_as_database(consumer: Path, tmp_path: Path) -> None:
    root = prepare_state_root(_root(consumer, tmp_path))
    os.mkdir(root.database_path)
    with pytest.raises(StateRootError) as caught:
        RunStore.open(root)
    assert caught.value.code == "state-component-type"


# ---------------------------------------------------------------------------------------------
# ownership (issue 11): a component or file owned by another user is refused, untouched
# ---------------------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root"
)
NOBODY = 65534


def _owned_root(consumer: Path, tmp_path: Path) -> StateRoot:
    root = resolve_state_root(consumer, xdg_state_home=str(tmp_path / "xdg"), home_dir="/")
    RunStore.open(root, clock=lambda: 1_000).close()
    return root


@needs_root
@pytest.mark.parametrize(
    "component",
    ["product_root", "roots_dir", "root_dir", "transactions_dir", "database_path"],
)
def test_a_component_owned_by_another_user_is_refused_and_left_alone(
    consumer: Path, tmp_path: Path, component: str
) -> None:
    root = _owned_root(consumer, tmp_path)
    path = getattr(root, component)
    os.chown(path, NOBODY, -1)
    os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    with open(root.database_path, "rb") as handle:
        before = handle.read()
    with pytest.raises(StateRootError) as raised:
        RunStore.open(root, clock=lambda: 2_000)
    assert raised.value.code == "state-root-not-owned"
    assert str(NOBODY) in str(raised.value) and path in str(raised.value)
    assert os.lstat(path).st_uid == NOBODY
    assert _mode(path) == (0o755 if os.path.isdir(path) else 0o644)  # not chmod'ed
    with open(root.database_path, "rb") as handle:
        assert handle.read() == before
    with pytest.raises(StateRootError):
        prepare_state_root(root)


@needs_root
def test_a_wal_file_owned_by_another_user_is_refused(consumer: Path, tmp_path: Path) -> None:
    root = _owned_root(consumer, tmp_path)
    wal = f"{root.database_path}-wal"
    Path(wal).touch()
    os.chown(wal, NOBODY, -1)
    with pytest.raises(StateRootError) as raised:
        RunStore.open(root)
    assert raised.value.code == "state-root-not-owned"


def _as_nobody(work: Callable[[], str]) -> str:
    """`work()` in a forked child running as nobody (the interpreter under /root is not
    executable by nobody, so no new process is started: modules are imported already)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = work()
        except BaseException as error:
            result = f"raised {type(error).__name__}: {error}"
        os.write(write, result.encode("utf-8", "backslashreplace"))
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@needs_root
def test_running_as_another_user_than_the_owner_is_a_coded_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a directory every user can reach (pytest's tmp_path is root-only)
    tmp = Path(tempfile.mkdtemp(prefix="cadence-owner-"))
    try:
        os.chmod(tmp, 0o755)
        for name in ("home", "state", "consumer"):
            (tmp / name).mkdir()
            os.chown(tmp / name, NOBODY, -1)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp / "state"))
        monkeypatch.setenv("HOME", str(tmp / "home"))
        monkeypatch.delenv("CADENCE_STORE_URL", raising=False)
        monkeypatch.chdir(tmp / "consumer")
        # root made the store first: its abel-cadence belongs to root
        root = resolve_state_root(tmp / "consumer")
        assert CliRunner().invoke(main, ["upgrade"]).exit_code == 0
        assert os.lstat(root.product_root).st_uid == 0

        def open_store() -> str:
            try:
                RunStore.open(resolve_state_root(os.getcwd())).close()
            except StateRootError as error:
                return error.code
            return "opened"

        def command() -> str:
            result = CliRunner().invoke(main, ["info"])
            return f"{result.exit_code}\n{result.stderr}"

        assert _as_nobody(open_store) == "state-root-not-owned"
        exit_code, stderr = _as_nobody(command).split("\n", 1)
        assert exit_code == "3", stderr
        assert stderr.startswith("error: state-root-not-owned\n"), stderr
        assert "Traceback" not in stderr
        assert os.lstat(root.product_root).st_uid == 0
    finally:
        shutil.rmtree(tmp)
