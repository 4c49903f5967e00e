"""Server-side layout of the console's two drawings, as geometry the templates write out as SVG
(no script, no library in the browser): the audit log's events over time, allowed against
denied, as stacked bars; and a memory store's lineage as a layered graph, sources to the left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from catalog.audit.auditors.service import Timeline
from catalog.lineage.schemas import Lineage, LineageEnd, TranscriptEnd

# --- events over time -------------------------------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT = 760, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 12, 40


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    allowed_y: float
    allowed_height: float
    denied_y: float
    denied_height: float
    allowed: int
    denied: int
    label: str  # the stretch of time and its counts, for a tooltip and screen readers


@dataclass(frozen=True)
class Tick:
    y: float
    value: int


@dataclass(frozen=True)
class TimelineChart:
    width: int
    height: int
    left: int
    bottom: float  # the y of the time axis
    right: float  # the x where the plot ends
    bars: list[Bar]
    ticks: list[Tick]
    start_label: str
    end_label: str
    allowed_total: int
    denied_total: int


def _when(moment: datetime, span_seconds: float) -> str:
    if span_seconds >= 2 * 86400:
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times 10^n at or above value (the top of the y axis)."""
    if value <= 1:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def timeline_chart(timeline: Timeline) -> TimelineChart:
    """Stacked bars per stretch of time: allowed below, denied (refused: `deny` and
    `unauthenticated`) above. System events are neither and are not drawn."""
    plot_width = CHART_WIDTH - _LEFT - _RIGHT
    plot_height = CHART_HEIGHT - _TOP - _BOTTOM
    bottom = _TOP + plot_height
    counts = [
        (b.counts.get("allow", 0), b.counts.get("deny", 0) + b.counts.get("unauthenticated", 0))
        for b in timeline.buckets
    ]
    top = _nice_ceiling(max((a + d for a, d in counts), default=0))
    slot = plot_width / max(1, len(timeline.buckets))
    gap = min(4.0, slot * 0.2)
    span = (timeline.end - timeline.start).total_seconds()
    bars = []
    for i, (bucket, (allowed, denied)) in enumerate(zip(timeline.buckets, counts, strict=True)):
        allowed_height = plot_height * allowed / top
        denied_height = plot_height * denied / top
        bars.append(
            Bar(
                x=round(_LEFT + i * slot + gap / 2, 2),
                width=round(slot - gap, 2),
                allowed_y=round(bottom - allowed_height, 2),
                allowed_height=round(allowed_height, 2),
                denied_y=round(bottom - allowed_height - denied_height, 2),
                denied_height=round(denied_height, 2),
                allowed=allowed,
                denied=denied,
                label=f"{_when(bucket.start, span)} to {_when(bucket.end, span)}: "
                f"{allowed} allowed, {denied} denied",
            )
        )
    ticks = [Tick(y=round(bottom - plot_height * v / top, 2), value=v) for v in sorted({0, top // 2, top})]
    return TimelineChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        left=_LEFT,
        bottom=bottom,
        right=CHART_WIDTH - _RIGHT,
        bars=bars,
        ticks=ticks,
        start_label=_when(timeline.start, span),
        end_label=_when(timeline.end, span),
        allowed_total=sum(a for a, _ in counts),
        denied_total=sum(d for _, d in counts),
    )


# --- lineage ------------------------------------------------------------------------------------------

NODE_WIDTH, NODE_HEIGHT = 300, 48
_COLUMN_GAP, _ROW_GAP, _MARGIN = 90, 24, 16
_LABEL_CHARS = 34


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Node:
    key: tuple[str, ...]
    kind: str  # entry, conversation or session
    label: str  # what the box says (shortened)
    detail: str  # the line under it (shortened)
    title: str  # everything, for a tooltip and screen readers
    deleted: bool
    level: int = 0
    x: float = 0
    y: float = 0


@dataclass(frozen=True)
class Link:
    source: Node
    target: Node
    depth: int
    path: str  # the SVG path of the arrow


@dataclass
class LineageGraph:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def _entry(end: LineageEnd) -> Node:
    store = end.memory_store or "(deleted store)"
    session = f" · session {end.session_id}" if end.session_id else ""
    state = " (deleted)" if end.deleted else ""
    return Node(
        key=("entry", store, end.scope, end.session_id or "", end.path),
        kind="entry",
        label=_short(f"{end.scope}: {end.path}"),
        detail=_short(f"{store}{session}{state}"),
        title=f"entry {end.path} in scope {end.scope} of {store}{session}{state}",
        deleted=end.deleted,
    )


def _transcript(end: TranscriptEnd) -> Node:
    thread = end.conversation_id or end.session_id or ""
    store = end.memory_store or "(deleted store)"
    state = " (deleted)" if end.deleted else ""
    return Node(
        key=(end.kind, store, thread),
        kind=end.kind,
        label=_short(f"{end.kind} {thread}"),
        detail=_short(f"{store} · {end.scope}{state}"),
        title=f"{end.kind} {thread} of {store}, scope {end.scope}{state}",
        deleted=end.deleted,
    )


def lineage_graph(lineage: Lineage) -> LineageGraph:
    """Nodes in columns by the longest chain of sources before them (a source left of what was
    derived from it), in name order within a column; arrows from source to derived entry."""
    nodes: dict[tuple[str, ...], Node] = {}
    pairs: list[tuple[tuple[str, ...], tuple[str, ...], int]] = []

    def add(node: Node) -> tuple[str, ...]:
        return nodes.setdefault(node.key, node).key

    for edge in lineage.edges:
        pairs.append((add(_entry(edge.source)), add(_entry(edge.target)), edge.depth))
    for origin in lineage.origins:
        pairs.append((add(_transcript(origin.source)), add(_entry(origin.target)), origin.depth))
    unique = list(dict.fromkeys(pairs))
    # longest-path layering; a cycle (an entry derived, later, from what it was a source of) stops
    # growing after as many rounds as there are nodes
    for _ in range(len(nodes)):
        changed = False
        for before, after, _depth in unique:
            if before != after and nodes[after].level < nodes[before].level + 1 <= len(nodes):
                nodes[after].level = nodes[before].level + 1
                changed = True
        if not changed:
            break
    columns: dict[int, list[Node]] = {}
    for node in nodes.values():
        columns.setdefault(node.level, []).append(node)
    levels = sorted(columns)
    for index, level in enumerate(levels):
        for row, node in enumerate(sorted(columns[level], key=lambda n: (n.label, n.key))):
            node.x = _MARGIN + index * (NODE_WIDTH + _COLUMN_GAP)
            node.y = _MARGIN + row * (NODE_HEIGHT + _ROW_GAP)
    links = []
    for source_key, target_key, depth in unique:
        source, target = nodes[source_key], nodes[target_key]
        x1, y1 = source.x + NODE_WIDTH, source.y + NODE_HEIGHT / 2
        x2, y2 = target.x, target.y + NODE_HEIGHT / 2
        if x2 <= x1:  # same column (a cycle): go round the right side
            x2 = target.x + NODE_WIDTH
            bend = _COLUMN_GAP / 2
            path = f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 + bend:g},{y2:g} {x2 + 6:g},{y2:g}"
        else:
            bend = (x2 - x1) / 2
            path = f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 - bend:g},{y2:g} {x2 - 6:g},{y2:g}"
        links.append(Link(source, target, depth, path))
    rows = max((len(c) for c in columns.values()), default=0)
    width = 2 * _MARGIN + max(1, len(levels)) * NODE_WIDTH + max(0, len(levels) - 1) * _COLUMN_GAP
    height = 2 * _MARGIN + max(1, rows) * NODE_HEIGHT + max(0, rows - 1) * _ROW_GAP
    ordered = sorted(nodes.values(), key=lambda n: (n.x, n.y))
    return LineageGraph(width=int(width), height=int(height), nodes=ordered, links=links)
