"""Small bar charts as inline SVG, drawn on the server (no chart library, no script).

Labels are escaped here: the SVG is inserted into the page as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from .formatting import format_time

WIDTH = 640
BAR_AREA = 120  # pixels of the tallest bar
LABEL_SPACE = 34


def bar_chart(title: str, bars: Sequence[tuple[str, int]], *, label_every: int = 1) -> Markup:
    """A bar chart of `(label, value)` pairs, each bar's value in its tooltip; every
    `label_every`th label is written under the axis."""
    if not bars:
        return Markup("")
    tallest = max(value for _, value in bars) or 1
    step = min(WIDTH / len(bars), 48.0)  # a few bars stay bars, not blocks
    height = BAR_AREA + LABEL_SPACE
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for index, (label, value) in enumerate(bars):
        bar = round(BAR_AREA * value / tallest, 1)
        x = round(index * step + step * 0.1, 1)
        parts.append(
            f'<rect x="{x}" y="{BAR_AREA - bar}" width="{round(step * 0.8, 1)}" '
            f'height="{bar}" fill="#3b6ea8"><title>{escape(label)}: {value}</title></rect>'
        )
        if index % label_every == 0:
            parts.append(
                f'<text x="{x}" y="{BAR_AREA + 14}" '
                f'font-size="11" text-anchor="start">{escape(label)}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def runs_per_state(by_state: dict[str, int]) -> Markup:
    """Runs per state."""
    return bar_chart("runs per state", sorted(by_state.items()))


def events_per_hour(
    hours: dict[int, int], *, last: int = 72, title: str = "events per hour"
) -> Markup:
    """Events per hour over the `last` hours that have events (hour starts in ms)."""
    shown = sorted(hours.items())[-last:]
    bars = [(format_time(start)[:13] + "h", count) for start, count in shown]
    return bar_chart(title, bars, label_every=max(1, len(bars) // 6))
