"""cadence-store: a durable, sha256 hash-chained run journal for SQLAlchemy applications."""

from typing import TYPE_CHECKING, Any

from . import journal
from .errors import (
    ArchiveInvalidError,
    CadenceStoreError,
    CheckpointError,
    HostWriteError,
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    LeaseFencedError,
    MigrationError,
    OperationConflictError,
    RunArchivedError,
    RunNotFoundError,
    SchemaOutOfDateError,
    StateRootError,
    StoreBusyError,
    StoreFormatError,
    StorePermissionError,
    StoreUnavailableError,
    TransactionAbortedError,
)
from .journal.archives import ArchiveReport
from .journal.feed import FeedItem
from .journal.note_keys import SignerKey, VerifierKey, generate_signer_key
from .journal.tree_views import (
    CheckpointReport,
    ConsistencyProof,
    InclusionProof,
    SignedCheckpoint,
)
from .journal.values import *  # noqa: F403 - the public value types (journal.values.__all__)
from .journal.views import (
    BindingRecord,
    OperationRecord,
    RunDetail,
    StoreCounts,
    TimelineEntry,
)
from .repository.run_repository import RunRepository
from .storage.engine import configure_engine
from .storage.models import OWNED_TABLES
from .storage.schema import downgrade, host_include_object, upgrade
from .store.run_store import RunStore
from .store.state_root import StateRoot, prepare_state_root, resolve_state_root
from .store.unit_of_work import UnitOfWork
from .transfer import copy_store, export_store, import_store, verify_export

if TYPE_CHECKING:
    from .async_store import AsyncRunRepository, AsyncRunStore, upgrade_async

# The async API loads on first use: `import cadence_store` needs neither the `async` extra
# nor SQLAlchemy's asyncio extension.
_ASYNC_NAMES = frozenset({"AsyncRunRepository", "AsyncRunStore", "upgrade_async"})


def __getattr__(name: str) -> Any:
    if name in _ASYNC_NAMES:
        from . import async_store

        return getattr(async_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "OWNED_TABLES",
    "ArchiveInvalidError",
    "AsyncRunRepository",
    "AsyncRunStore",
    "BindingRecord",
    "CadenceStoreError",
    "CheckpointError",
    "ArchiveReport",
    "CheckpointReport",
    "ConsistencyProof",
    "FeedItem",
    "InclusionProof",
    "InvalidInputError",
    "InvalidTransitionError",
    "JournalIntegrityError",
    "HostWriteError",
    "LeaseFencedError",
    "MigrationError",
    "OperationConflictError",
    "OperationRecord",
    "RunDetail",
    "RunArchivedError",
    "RunNotFoundError",
    "RunRepository",
    "RunStore",
    "SchemaOutOfDateError",
    "SignedCheckpoint",
    "SignerKey",
    "StateRoot",
    "StateRootError",
    "StoreBusyError",
    "StoreCounts",
    "StoreFormatError",
    "StorePermissionError",
    "StoreUnavailableError",
    "TransactionAbortedError",
    "TimelineEntry",
    "UnitOfWork",
    "VerifierKey",
    "configure_engine",
    "copy_store",
    "downgrade",
    "export_store",
    "generate_signer_key",
    "host_include_object",
    "import_store",
    "prepare_state_root",
    "resolve_state_root",
    "upgrade",
    "upgrade_async",
    "verify_export",
]
__all__ += journal.values.__all__
