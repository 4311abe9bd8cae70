"""Moving whole runs between databases: the export record (`record`), its offline check
(`offline`), the movement (`movement`: export, copy; `importing`: import) and archive
files (`archive_file`, restored by `restore`). Every name is importable from here, as it
was when this was one module."""

from __future__ import annotations

from .importing import import_store
from .movement import (
    Bind,
    Progress,
    ProgressCallback,
    TransferProgress,
    TransferReport,
    copy_store,
    export_store,
    iter_records,
    read_record,
)
from .offline import check_record, iter_verify_export, verify_export
from .record import (
    DEFAULT_BATCH_SIZE,
    HOSTILE_CODES,
    INVALID_RECORD,
    RECORD_KEYS,
    Record,
    RunCheck,
    describe_difference,
    dump_record,
    parse_record,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "HOSTILE_CODES",
    "INVALID_RECORD",
    "RECORD_KEYS",
    "Bind",
    "Progress",
    "ProgressCallback",
    "Record",
    "RunCheck",
    "TransferProgress",
    "TransferReport",
    "check_record",
    "copy_store",
    "describe_difference",
    "dump_record",
    "export_store",
    "import_store",
    "iter_records",
    "iter_verify_export",
    "parse_record",
    "read_record",
    "verify_export",
]
