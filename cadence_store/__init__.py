"""cadence-store: a durable, sha256 hash-chained run journal for SQLAlchemy applications."""

from .engine import configure_engine
from .errors import (
    CadenceStoreError,
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    LeaseFencedError,
    MigrationError,
    OperationConflictError,
    RunNotFoundError,
    SchemaOutOfDateError,
    StateRootError,
    StoreBusyError,
    StoreFormatError,
    StoreUnavailableError,
)
from .journal import (
    ApprovalProof,
    BindDelivery,
    DeliveryBinding,
    OperationLease,
    OperationStatus,
    RunEvent,
    RunProjection,
)
from .journal.views import (
    BindingRecord,
    OperationRecord,
    RunDetail,
    StoreCounts,
    TimelineEntry,
)
from .models import OWNED_TABLES
from .repository import RunRepository
from .schema import host_include_object, upgrade
from .state_root import StateRoot, prepare_state_root, resolve_state_root
from .store import RunStore
from .transfer import copy_store, export_store, import_store, verify_export
from .unit_of_work import UnitOfWork

__version__ = "0.1.0"

__all__ = [
    "OWNED_TABLES",
    "ApprovalProof",
    "BindDelivery",
    "BindingRecord",
    "CadenceStoreError",
    "DeliveryBinding",
    "InvalidInputError",
    "InvalidTransitionError",
    "JournalIntegrityError",
    "LeaseFencedError",
    "MigrationError",
    "OperationConflictError",
    "OperationLease",
    "OperationRecord",
    "OperationStatus",
    "RunDetail",
    "RunEvent",
    "RunNotFoundError",
    "RunProjection",
    "RunRepository",
    "RunStore",
    "SchemaOutOfDateError",
    "StateRoot",
    "StateRootError",
    "StoreBusyError",
    "StoreCounts",
    "StoreFormatError",
    "StoreUnavailableError",
    "TimelineEntry",
    "UnitOfWork",
    "configure_engine",
    "copy_store",
    "export_store",
    "host_include_object",
    "import_store",
    "prepare_state_root",
    "resolve_state_root",
    "upgrade",
    "verify_export",
]
