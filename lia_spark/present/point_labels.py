"""Point labels that never overlap: each label goes to the first free place around its point.

Places are tried nearest first (8 directions at growing distances, a leader line from the third ring on); a place
is free when the label's box stays inside the axes and clear of every label placed before, every marker and the
legend (pinned where ``loc="best"`` put it). A label with no free place is left out and counted
(:func:`note_left_out` says so on the figure). Call it after the figure's layout is final (``tight_layout``):
placement works in display pixels.
"""
from __future__ import annotations

from typing import Any, Sequence

MARKER_PIXELS = 4.0  # half the side of the square kept clear around each point
RINGS_POINTS = (3.0, 9.0, 16.0, 26.0, 38.0)  # distances of the tried places from the point
LEADER_FROM_RING = 2  # rings from this index on draw a thin line back to the point
DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))


def _alignment(dx: int, dy: int) -> tuple[str, str]:
    """Text alignment that makes the label grow away from its point."""
    return ("left" if dx > 0 else "right" if dx < 0 else "center",
            "bottom" if dy > 0 else "top" if dy < 0 else "center")


def _inside(box: Any, frame: Any) -> bool:
    return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1


def _place(label: Any, renderer: Any, frame: Any, taken: list[Any]) -> int | None:
    """Move ``label`` to its nearest free place; the ring it went to, or None when every place is taken."""
    for ring, distance in enumerate(RINGS_POINTS):
        for dx, dy in DIRECTIONS:
            label.xyann = (dx * distance, dy * distance)
            horizontal, vertical = _alignment(dx, dy)
            label.set_horizontalalignment(horizontal)
            label.set_verticalalignment(vertical)
            box = label.get_window_extent(renderer)
            if _inside(box, frame) and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                return ring
    return None


def label_points(axis: Any, points: Sequence[tuple[float, float]], texts: Sequence[str], *,
                 fontsize: float = 6.0) -> int:
    """Annotate each point (data coordinates) of ``axis`` with its text, no two labels overlapping and none on a
    marker or the legend; return how many labels found no free place and were left out."""
    from matplotlib.transforms import Bbox

    axis.figure.canvas.draw()  # settles the layout, and where loc="best" puts the legend
    renderer = axis.figure.canvas.get_renderer()
    frame = axis.get_window_extent(renderer)
    taken = [Bbox.from_extents(x - MARKER_PIXELS, y - MARKER_PIXELS, x + MARKER_PIXELS, y + MARKER_PIXELS)
             for x, y in (axis.transData.transform(points) if len(points) else ())]
    legend = axis.get_legend()
    if legend is not None:  # pinned there: "best" would choose again, among the labels, when the figure is saved
        box = legend.get_window_extent(renderer)
        legend.set_loc(tuple(axis.transAxes.inverted().transform((box.x0, box.y0))))
        taken.append(box)
    left_out = 0
    for point, text in zip(points, texts):
        label = axis.annotate(text, point, xytext=(0, 0), textcoords="offset points", fontsize=fontsize)
        ring = _place(label, renderer, frame, taken)
        if ring is None:
            label.remove()
            left_out += 1
        elif ring >= LEADER_FROM_RING:  # far from its point: drawn again with a thin line leading back to it
            label.remove()
            axis.annotate(text, point, xytext=label.xyann, textcoords="offset points", fontsize=fontsize,
                          ha=label.get_horizontalalignment(), va=label.get_verticalalignment(),
                          arrowprops={"arrowstyle": "-", "color": "0.5", "linewidth": 0.5, "shrinkA": 0, "shrinkB": 2})
    return left_out


def note_left_out(figure: Any, count: int) -> None:
    """Say in the figure's bottom-right corner (inside the layout's bottom margin) how many point labels were left
    out; nothing when none was."""
    if count:
        figure.text(0.995, 0.004, f"{count} point label{'s' if count != 1 else ''} left out to avoid overlaps",
                    ha="right", va="bottom", fontsize=6, color="0.3")
