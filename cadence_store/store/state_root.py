"""The owner-private state root of cadence 1.x, where the embedded SQLite store lives.

`$XDG_STATE_HOME` if absolute, else `~/.local/state`; then
`abel-cadence/roots/<sha256 of the consumer root's real path>/control.sqlite3`, so an
existing cadence 1.x user's store is found where cadence 1.x left it. Directories are
0700, the database and its `-wal`/`-shm` files 0600; a symlinked component or one of the
wrong type is refused, and so is a state root inside the consumer root (before anything is
created). Like ssh with a key file, every existing component from `abel-cadence` down, and
the database files, must belong to the user running the store (`state-root-not-owned`):
another owner could swap the store, and is never chmod'ed into looking private.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import StateRootError

PRODUCT_DIR = "abel-cadence"
DATABASE_NAME = "control.sqlite3"
NOT_OWNED = "state-root-not-owned"


@dataclass(frozen=True)
class StateRoot:
    consumer_root: str
    consumer_root_hash: str
    state_base: str
    product_root: str
    roots_dir: str
    root_dir: str
    database_path: str
    artifacts_dir: str
    workspaces_dir: str
    transactions_dir: str

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.database_path}"


def _inspect_existing_components(absolute: str) -> None:
    """Refuse a symlink anywhere on the path, or a non-directory before its end."""
    parts = Path(absolute).parts
    current = Path(parts[0])
    for part in parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return
        except PermissionError as error:  # a parent another user keeps private
            raise StateRootError(NOT_OWNED, f"{current}: {error.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            raise StateRootError("state-component-symlink")
        if not stat.S_ISDIR(info.st_mode) and str(current) != absolute:
            raise StateRootError("state-component-type")


def _canonical_future_path(path: str) -> str:
    """The real path of `path`, whose tail may not exist yet."""
    absolute = os.path.abspath(path)
    _inspect_existing_components(absolute)
    cursor = absolute
    missing: list[str] = []
    while True:
        if os.path.lexists(cursor):
            return os.path.join(os.path.realpath(cursor), *reversed(missing))
        parent = os.path.dirname(cursor)
        if parent == cursor:
            return absolute
        missing.append(os.path.basename(cursor))
        cursor = parent


def _state_base(xdg_state_home: str | None, home_dir: str) -> str:
    if xdg_state_home and os.path.isabs(xdg_state_home):
        return _canonical_future_path(xdg_state_home)
    if not os.path.isabs(home_dir):
        raise StateRootError("invalid-state-base")
    return _canonical_future_path(os.path.join(home_dir, ".local", "state"))


def _contains(parent: str, candidate: str) -> bool:
    relative = os.path.relpath(candidate, parent)
    return relative == "." or not (relative.startswith("..") or os.path.isabs(relative))


def consumer_root_hash(consumer_root: str | os.PathLike[str]) -> str:
    """sha256 of a consumer root's real path, as cadence 1.x hashed it (nothing is checked)."""
    real_root = os.path.realpath(os.path.abspath(os.fspath(consumer_root)))
    return hashlib.sha256(real_root.encode("utf-8", "surrogateescape")).hexdigest()


def resolve_state_root(
    consumer_root: str | os.PathLike[str],
    *,
    xdg_state_home: str | None = None,
    home_dir: str | None = None,
) -> StateRoot:
    """Where the private store of `consumer_root` lives (nothing is created).

    `xdg_state_home` / `home_dir` default to `$XDG_STATE_HOME` and the user's home.
    """
    try:
        real_root = os.path.realpath(os.path.abspath(os.fspath(consumer_root)), strict=True)
        if not os.path.isdir(real_root):
            raise StateRootError("consumer-root-unavailable")
    except (OSError, TypeError, ValueError):
        raise StateRootError("consumer-root-unavailable") from None
    if xdg_state_home is None:
        xdg_state_home = os.environ.get("XDG_STATE_HOME")
    if home_dir is None:
        home_dir = os.path.expanduser("~")
    state_base = _state_base(xdg_state_home, home_dir)
    root_hash = consumer_root_hash(real_root)
    product_root = _canonical_future_path(os.path.join(state_base, PRODUCT_DIR))
    roots_dir = _canonical_future_path(os.path.join(product_root, "roots"))
    root_dir = _canonical_future_path(os.path.join(roots_dir, root_hash))
    if _contains(real_root, root_dir):
        raise StateRootError("state-root-inside-consumer")
    return StateRoot(
        consumer_root=real_root,
        consumer_root_hash=root_hash,
        state_base=state_base,
        product_root=product_root,
        roots_dir=roots_dir,
        root_dir=root_dir,
        database_path=os.path.join(root_dir, DATABASE_NAME),
        artifacts_dir=os.path.join(root_dir, "artifacts"),
        workspaces_dir=os.path.join(root_dir, "workspaces"),
        transactions_dir=os.path.join(root_dir, "transactions"),
    )


def _require_owner(path: str, info: os.stat_result) -> None:
    """Refuse a component another user owns (root included: it is not chmod'ed either)."""
    if info.st_uid != os.geteuid():
        raise StateRootError(
            NOT_OWNED, f"{path} is owned by uid {info.st_uid}, not by uid {os.geteuid()}"
        )


def _denied(path: str, error: OSError) -> StateRootError:
    # the component cannot even be looked at: it is someone else's
    return StateRootError(NOT_OWNED, f"{path}: {error.strerror}")


def _ensure_directory(directory: str, *, owned: bool = True) -> None:
    """`directory` exists as a real directory (created 0700); `owned`: it must be ours."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        parent = os.path.dirname(directory)
        if parent != directory:
            _ensure_directory(parent, owned=False)
        try:
            os.mkdir(directory, 0o700)
            os.chmod(directory, 0o700)
        except PermissionError as error:
            raise _denied(directory, error) from None
        return
    except PermissionError as error:
        raise _denied(directory, error) from None
    _require_kind(directory, info, stat.S_ISDIR, owned=owned)


def _require_kind(
    path: str, info: os.stat_result, is_kind: Callable[[int], bool], *, owned: bool
) -> None:
    """`path` (lstat'ed as `info`) is of the kind wanted, not a link, and ours if `owned`."""
    if stat.S_ISLNK(info.st_mode):
        raise StateRootError("state-component-symlink")
    if not is_kind(info.st_mode):
        raise StateRootError("state-component-type")
    if owned:
        _require_owner(path, info)


def check_regular_file(path: str) -> bool:
    """True when `path` is a regular file of ours, False when absent; refuses links,
    other types and another user's file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except PermissionError as error:
        raise _denied(path, error) from None
    _require_kind(path, info, stat.S_ISREG, owned=True)
    return True


def prepare_state_root(root: StateRoot) -> StateRoot:
    """Re-check `root` and create its directories (0700); the database is not created."""
    checked = resolve_state_root(
        root.consumer_root,
        xdg_state_home=root.state_base,
        home_dir=os.path.dirname(root.state_base),
    )
    if checked.consumer_root_hash != root.consumer_root_hash or checked.root_dir != root.root_dir:
        raise StateRootError("invalid-state-base")
    _ensure_directory(root.state_base, owned=False)  # e.g. ~/.local/state: not ours to judge
    for directory in (
        root.product_root,
        root.roots_dir,
        root.root_dir,
        root.artifacts_dir,
        root.workspaces_dir,
        root.transactions_dir,
    ):
        _ensure_directory(directory)
        os.chmod(directory, 0o700)
    check_regular_file(root.database_path)
    return root


def secure_database_files(database_path: str) -> None:
    """Keep the database and its `-wal` / `-shm` owner-only (0600)."""
    for path in (database_path, f"{database_path}-wal", f"{database_path}-shm"):
        if check_regular_file(path):
            os.chmod(path, 0o600)


def create_database_file(database_path: str) -> None:
    """Create the database file 0600 (never following a link) if it does not exist."""
    if check_regular_file(database_path):
        return
    try:
        descriptor = os.open(
            database_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600
        )
    except FileExistsError:
        check_regular_file(database_path)
        return
    except PermissionError as error:
        raise _denied(database_path, error) from None
    os.close(descriptor)
