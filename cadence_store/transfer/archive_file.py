"""Archive files (`cadence-store-archive/1`): the runs `RunStore.archive` deleted from a
store, each with the inclusion proofs of its events' leaves in a signed checkpoint's tree.

The lines themselves are `journal.archive_format`'s (pure, so the store writes them too);
this module is where callers find them.
"""

from __future__ import annotations

from ..journal.archive_format import (
    ARCHIVE_FORMAT,
    ARCHIVE_INVALID,
    ArchivedLeaf,
    ArchiveHeader,
    ArchiveTrailer,
    header_line,
    run_line,
    trailer_line,
)

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_INVALID",
    "ArchiveHeader",
    "ArchiveTrailer",
    "ArchivedLeaf",
    "header_line",
    "run_line",
    "trailer_line",
]
