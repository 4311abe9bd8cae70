"""MkDocs hook: pages that show tables generated from the code.

`<!-- generated: transition-table -->` becomes the legal transition table of the run
state machine, so the documentation cannot drift from `cadence_store.journal.states`.
"""

from __future__ import annotations

from typing import Any

from cadence_store.journal.states import LEGAL_TRANSITIONS, RUN_STATES, TERMINAL_STATES

TRANSITION_TABLE = "<!-- generated: transition-table -->"


def transition_table() -> str:
    lines = ["| from | may move to |", "|---|---|"]
    for state in RUN_STATES:
        targets = LEGAL_TRANSITIONS[state]
        moves = ", ".join(f"`{target}`" for target in targets) or "none"
        name = f"`{state}`" + (" (terminal)" if state in TERMINAL_STATES else "")
        lines.append(f"| {name} | {moves} |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(TRANSITION_TABLE, transition_table())
