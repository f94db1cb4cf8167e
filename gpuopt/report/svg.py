"""Inline SVG charts for the HTML report, drawn in plain Python (no plotting library, no script).

Why hand-made: the page must open offline and stay one file, and ``gpuopt report`` must not pay
for importing matplotlib or plotly. Four charts are enough: stacked per-step bars, a time line
chart with axes, a 100% stacked bar, and one bar per rank. Every label passes through
:func:`esc`; data only ever lands in text nodes and quoted attribute values, never in element or
attribute names.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuopt.units import duration_unit, fmt_duration, fmt_frac, text

if TYPE_CHECKING:
    from gpuopt.report.headline import StepSplit

COLORS = {
    "data_wait": "#e4572e",
    "h2d": "#a05195",
    "sync": "#f3a712",
    "compute": "#2a9d5c",
    "other": "#9aa0a6",
    "collective": "#4361ee",
    "rest": "#7cc49c",  # compute + other, where only the total is known per step
    "cpu": "#3b6fd8",
    "gpu": "#2a9d5c",
    "rss_bytes": "#3b6fd8",
    "gpu_memory_bytes": "#2a9d5c",
}
FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'
_TEXT = 'fill="currentColor"'
_MIDDLE = f'text-anchor="middle" {_TEXT}'


def esc(value: Any) -> str:
    return html.escape(text(value), quote=True)


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``hi`` (steps of 1, 2 or 5 × 10^k)."""
    if not hi > 0 or not math.isfinite(hi):
        return [0.0, 1.0]
    raw = hi / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = int(math.ceil(hi / step - 1e-9))
    return [round(i * step, 12) for i in range(n + 1)]


def duration_tick_formatter(top: float) -> Callable[[float], str]:
    """Tick labels in one unit chosen from the top tick (``0``, ``10 ms``, ``20 ms``...), so an
    axis never mixes "500 µs" with "1.00 ms"."""
    factor, unit = duration_unit(top)
    return lambda t: "0" if t == 0 else f"{t * factor:g} {unit}"


def _svg_open(width: int, height: int, label: str) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{esc(label)}" {FONT} font-size="12">'
    )


@dataclass(frozen=True)
class _Plot:
    """A chart's plotting area inside its ``width`` × ``height`` box."""

    width: int
    height: int
    left: int
    top: int
    pw: int  # plot width
    ph: int  # plot height

    @classmethod
    def of(cls, width: int, height: int, left: int, right: int, top: int, bottom: int) -> _Plot:
        return cls(width, height, left, top, width - left - right, height - top - bottom)

    @property
    def base(self) -> int:
        """The y of the x axis."""
        return self.top + self.ph

    def y(self, value: float, top_value: float) -> float:
        return self.base - value / top_value * self.ph

    def hline(self, y: float, opacity: str) -> str:
        return (
            f'<line x1="{self.left}" x2="{self.left + self.pw}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" opacity="{opacity}"/>'
        )

    def axis(self) -> str:
        return (
            f'<line x1="{self.left}" x2="{self.left + self.pw}" y1="{self.base}" '
            f'y2="{self.base}" stroke="currentColor" opacity="0.5"/>'
        )

    def y_grid(self, ticks: list[float], top_value: float, label: Callable[[float], str]) -> str:
        """A faint line and a right-aligned label at each tick, 0 at the axis."""
        out = []
        for t in ticks:
            y = self.y(t, top_value)
            out.append(self.hline(y, "0.12"))
            out.append(
                f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" {_TEXT}>'
                f"{esc(label(t))}</text>"
            )
        return "".join(out)

    def caption(self, label: str) -> str:
        """The x axis' name, centred under it."""
        return (
            f'<text x="{self.left + self.pw / 2:.1f}" y="{self.height - 3}" {_MIDDLE} '
            f'opacity="0.8">{esc(label)}</text>'
        )


# --- per-step bars ---------------------------------------------------------------------------


@dataclass
class StepBar:
    """One bar: a step (or the mean of a bucket of steps)."""

    label: str
    parts: list[tuple[str, float]]  # (color key, seconds), bottom to top
    warmup: bool


def step_bars(series: list[StepSplit], max_bars: int = 400) -> tuple[list[StepBar], int]:
    """Bars for the per-step chart and how many steps each measured bar stands for (1 = one
    step). Warm-up steps stay single (they are few); measured steps are averaged in buckets only
    when there are more than ``max_bars``."""
    warm = [r for r in series if r.warmup]
    measured = [r for r in series if not r.warmup]
    per = max(1, math.ceil(len(measured) / max(1, max_bars - len(warm))))
    bars = [StepBar(f"step {r.index} (warm-up)", r.parts(), True) for r in warm]
    for i in range(0, len(measured), per):
        group = measured[i : i + per]
        if per == 1:
            label = f"step {group[0].index}"
        else:
            label = f"steps {group[0].index}–{group[-1].index} (mean)"
        columns = zip(*(r.parts() for r in group), strict=True)
        parts = [(col[0][0], sum(v for _, v in col) / len(group)) for col in columns]
        bars.append(StepBar(label, parts, False))
    return bars, per


_PART_LABEL = {
    "data_wait": "data wait",
    "h2d": "copies",
    "sync": "syncs",
    "rest": "compute + other",
}


def step_chart(series: list[StepSplit], width: int = 1100, height: int = 260) -> str:
    """Stacked per-step bars (data wait, copies, syncs, rest) with warm-up steps shaded. The
    y scale fits the measured steps; a taller bar (usually warm-up) is cut and marked ▲."""
    bars, per = step_bars(series)
    if not bars:
        return ""
    plot = _Plot.of(width, height, left=64, right=12, top=22, bottom=34)
    totals = [sum(v for _, v in b.parts) for b in bars]
    measured_tot = [t for t, b in zip(totals, bars, strict=True) if not b.warmup] or totals
    ticks = nice_ticks(max(measured_tot) * 1.08 or 1.0, 4)
    y_hi = ticks[-1]
    slot = plot.pw / len(bars)
    bw = max(1.0, slot * 0.8) if slot >= 3 else slot
    out = [_svg_open(width, height, "step time per step, stacked by cause")]
    out.append(_warmup_shade(plot, sum(1 for b in bars if b.warmup), slot))
    out.append(plot.y_grid(ticks, y_hi, duration_tick_formatter(y_hi)))
    for i, (bar, total) in enumerate(zip(bars, totals, strict=True)):
        out.append(_step_bar(plot, bar, total, plot.left + i * slot + (slot - bw) / 2, bw, y_hi))
    out.append(plot.axis())
    out.append(_step_labels(plot, bars, slot))
    out.append(plot.caption("step" if per == 1 else f"step (measured bars: mean of {per} steps)"))
    out.append("</svg>")
    return "".join(out)


def _warmup_shade(plot: _Plot, n_warm: int, slot: float) -> str:
    """The warm-up steps' background and its label ("◀ warm-up" where the band is narrow)."""
    if not n_warm:
        return ""
    wx = plot.left + n_warm * slot
    y = plot.height - 3
    band = (
        f'<rect x="{plot.left}" y="{plot.top}" width="{wx - plot.left:.1f}" height="{plot.ph}" '
        f'fill="currentColor" opacity="0.07"/>'
    )
    if n_warm * slot < 60:
        return band + f'<text x="{plot.left + 2}" y="{y}" {_TEXT} opacity="0.8">◀ warm-up</text>'
    x = (plot.left + wx) / 2
    return band + f'<text x="{x:.1f}" y="{y}" {_MIDDLE} opacity="0.8">warm-up</text>'


def _step_bar(plot: _Plot, bar: StepBar, total: float, x: float, bw: float, y_hi: float) -> str:
    """One stacked bar with its hover text; a bar above the scale is cut and marked ▲."""
    y = float(plot.base)
    detail = ", ".join(f"{_PART_LABEL[k]} {fmt_duration(v)}" for k, v in bar.parts if v > 0)
    out = [
        f'<g opacity="{0.45 if bar.warmup else 1}"><title>{esc(bar.label)}: '
        f"{esc(fmt_duration(total))} ({esc(detail)})</title>"
    ]
    for key, v in bar.parts:
        h = min(v, max(0.0, y_hi - (plot.base - y) / plot.ph * y_hi)) / y_hi * plot.ph
        if h <= 0:
            continue
        y -= h
        out.append(
            f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{h:.2f}" '
            f'fill="{COLORS[key]}"/>'
        )
    if total > y_hi:
        out.append(
            f'<text x="{x + bw / 2:.1f}" y="{plot.top - 2}" text-anchor="middle" font-size="9" '
            f"{_TEXT}>▲</text>"
        )
    out.append("</g>")
    return "".join(out)


def _step_labels(plot: _Plot, bars: list[StepBar], slot: float) -> str:
    """Step numbers under the bars: the first, a few in between, the last."""
    n = len(bars)
    out = []
    for i in sorted({0, n - 1, *range(0, n, max(1, n // 8))}):
        if 0 < i < n - 1 and (n - 1 - i) < max(1, n // 16):
            continue  # too close to the last label
        x = plot.left + (i + 0.5) * slot
        label = bars[i].label.split(" ")[1].split("–")[0]
        out.append(f'<text x="{x:.1f}" y="{plot.base + 15}" {_MIDDLE}>{esc(label)}</text>')
    return "".join(out)


# --- lines over time -------------------------------------------------------------------------


def line_chart(
    t_s: Sequence[float],
    lines: list[tuple[str, str, Sequence[float | None]]],
    y_hi: float,
    y_fmt: Callable[[float], str],
    label: str,
    width: int = 1100,
    height: int = 220,
    max_points: int = 1500,
) -> str:
    """Lines over time (``lines``: (color key, legend label, values aligned to ``t_s``)) with a
    time axis in seconds and a y axis from 0 to ``y_hi``; gaps where a value is missing."""
    if len(t_s) < 2 or not lines:
        return ""
    plot = _Plot.of(width, height, left=64, right=12, top=24, bottom=34)
    span = (t_s[-1] - t_s[0]) or 1.0
    yticks = nice_ticks(y_hi, 4)
    y_top = yticks[-1] or 1.0
    out = [_svg_open(width, height, label)]
    out.append(plot.y_grid(yticks, y_top, y_fmt))
    out.append(_time_ticks(plot, span))
    out.append(plot.axis())
    out.append(plot.caption("time since start (s)"))
    step = max(1, math.ceil(len(t_s) / max_points))
    lx = plot.left
    for key, name, values in lines:
        color = COLORS.get(key, "#555")
        segments = _segments(plot, t_s, values, step, span, y_top)
        out.append(_polylines(segments, color))
        out.append(
            f'<rect x="{lx}" y="6" width="12" height="4" fill="{color}"/>'
            f'<text x="{lx + 16}" y="12" {_TEXT}>{esc(name)}</text>'
        )
        lx += 24 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


def _time_ticks(plot: _Plot, span: float) -> str:
    """Ticks and labels of the time axis, in seconds since the first sample."""
    out = []
    for t in (t for t in nice_ticks(span, 8) if t <= span + 1e-9):
        x = plot.left + t / span * plot.pw
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{plot.base}" y2="{plot.base + 4}" '
            f'stroke="currentColor" opacity="0.5"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{plot.base + 16}" {_MIDDLE}>{esc(_fmt_seconds_tick(t))}</text>'
        )
    return "".join(out)


def _segments(
    plot: _Plot,
    t_s: Sequence[float],
    values: Sequence[float | None],
    step: int,
    span: float,
    y_top: float,
) -> list[list[str]]:
    """The line's points (``"x,y"``), averaged over ``step`` samples, split where a stretch of
    samples is missing."""
    segments: list[list[str]] = [[]]
    for i in range(0, len(t_s), step):
        chunk = [v for v in values[i : i + step] if v is not None]
        if not chunk:
            if segments[-1]:
                segments.append([])
            continue
        v = sum(chunk) / len(chunk)
        x = plot.left + (t_s[i] - t_s[0]) / span * plot.pw
        y = plot.y(min(max(v, 0.0), y_top), y_top)
        segments[-1].append(f"{x:.1f},{y:.1f}")
    return segments


def _polylines(segments: list[list[str]], color: str) -> str:
    """A polyline per segment; a lone point as a dot."""
    out = []
    for seg in segments:
        if len(seg) == 1:
            cx, cy = seg[0].split(",")
            out.append(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{color}"/>')
        elif seg:
            out.append(
                f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" '
                f'stroke-width="1.6" stroke-linejoin="round"/>'
            )
    return "".join(out)


def _fmt_seconds_tick(t: float) -> str:
    return f"{t:.0f}" if float(t).is_integer() or t >= 10 else f"{t:g}"


# --- bars of shares --------------------------------------------------------------------------


def hbar(
    items: list[tuple[str, str, float]],
    width: int = 1100,
    height: int = 34,
    label: str = "breakdown",
) -> str:
    """A 100% stacked horizontal bar; segments wide enough carry their percentage."""
    total = sum(f for _, _, f in items)
    if total <= 0:
        return ""
    out = [_svg_open(width, height, label)]
    x = 0.0
    for key, name, frac in items:
        w = frac / total * width
        if w <= 0:
            continue
        out.append(
            f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" '
            f'fill="{COLORS.get(key, "#888")}"><title>{esc(name)} {esc(fmt_frac(frac))}</title>'
            "</rect>"
        )
        out.append(_segment_label(x, w, height, name, fmt_frac(frac)))
        x += w
    out.append("</svg>")
    return "".join(out)


def _segment_label(x: float, w: float, height: int, name: str, share: str) -> str:
    """Inside a segment: "name share" where it fits, else the share alone, else nothing."""
    full = f"{name} {share}"
    if w > 7.2 * len(full) + 10:
        shown = full
    elif w > 7.2 * len(share) + 8:
        shown = share
    else:
        return ""
    return (
        f'<text x="{x + w / 2:.1f}" y="{height / 2 + 4:.1f}" text-anchor="middle" fill="#fff" '
        f'font-weight="600">{esc(shown)}</text>'
    )


def rank_bars(
    rows: list[tuple[str, float | None, list[tuple[str, str, float]]]], width: int = 1100
) -> str:
    """One horizontal bar per rank, its length the rank's step median and its segments the
    rank's breakdown: a straggler is the long bar, and its colours say why."""
    bars = [(name, median, items) for name, median, items in rows if median and median > 0]
    if not bars:
        return ""
    label_w, bar_h, gap = 70, 18, 8
    longest = max(median for _, median, _ in bars)
    pw = width - label_w - 90
    height = len(bars) * (bar_h + gap) + 6
    out = [_svg_open(width, height, "step median and breakdown per rank")]
    for i, (name, median, items) in enumerate(bars):
        y = 3 + i * (bar_h + gap)
        length = median / longest * pw
        out.append(
            f'<text x="{label_w - 8}" y="{y + bar_h - 5}" text-anchor="end" {_TEXT}>'
            f"{esc(name)}</text>"
        )
        out.append(_rank_segments(name, items, float(label_w), y, length, bar_h))
        out.append(
            f'<text x="{label_w + length + 6:.1f}" y="{y + bar_h - 5}" {_TEXT}>'
            f"{esc(fmt_duration(median))}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _rank_segments(
    name: str, items: list[tuple[str, str, float]], x: float, y: int, length: float, bar_h: int
) -> str:
    """One rank's bar split by its breakdown (one grey bar where it has none)."""
    if not items:
        return (
            f'<rect x="{x:.2f}" y="{y}" width="{length:.2f}" height="{bar_h}" '
            f'fill="{COLORS["other"]}"/>'
        )
    total = sum(f for _, _, f in items) or 1.0
    out = []
    for key, seg_name, frac in items:
        w = frac / total * length
        if w <= 0:
            continue
        out.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" '
            f'fill="{COLORS.get(key, "#888")}"><title>{esc(name)}: {esc(seg_name)} '
            f"{esc(fmt_frac(frac))}</title></rect>"
        )
        x += w
    return "".join(out)


# --- runs side by side (gpuopt compare) ------------------------------------------------------

RUN_COLORS = ("#8a94a6", "#3b6fd8", "#e08a00", "#a05195", "#2a9d5c", "#e4572e")


@dataclass(frozen=True)
class MetricBars:
    """One metric across the runs: its name, and per run a number (None: not measured) and the
    text to show for it."""

    name: str
    numbers: list[float | None]
    shown: list[str]


def metric_bars(metrics: list[MetricBars], runs: list[str], width: int = 900) -> str:
    """One group of bars per metric, one bar per run, each metric on its own scale (its largest
    value the longest bar): metrics of different units side by side, and which run is longer
    at a glance. A run that did not measure the metric gets no bar."""
    if not metrics or not runs:
        return ""
    label_w, bar_h, gap = 300, 13, 12
    pw = width - label_w - 110
    group_h = len(runs) * bar_h + gap
    height = len(metrics) * group_h + 4
    out = [_svg_open(width, height, "each metric, run by run")]
    for i, m in enumerate(metrics):
        y0 = 2 + i * group_h
        out.append(f'<g class="metric" data-metric="{esc(m.name)}">')
        out.append(
            f'<text x="{label_w - 10}" y="{y0 + len(runs) * bar_h / 2 + 4:.1f}" '
            f'text-anchor="end" {_TEXT}>{esc(_clip(m.name, 44))}<title>{esc(m.name)}</title>'
            "</text>"
        )
        top = max((abs(v) for v in m.numbers if v is not None), default=0.0)
        for j, (run, value, shown) in enumerate(zip(runs, m.numbers, m.shown, strict=False)):
            if value is None:
                continue
            y = y0 + j * bar_h
            length = abs(value) / top * pw if top > 0 else 0.0
            color = RUN_COLORS[j % len(RUN_COLORS)]
            out.append(
                f'<rect class="bar" x="{label_w}" y="{y}" width="{length:.2f}" '
                f'height="{bar_h - 2}" fill="{color}"><title>{esc(run)}: {esc(shown)}</title>'
                "</rect>"
                f'<text x="{label_w + length + 5:.1f}" y="{y + bar_h - 3}" font-size="11" '
                f"{_TEXT}>{esc(run)} {esc(shown)}</text>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _clip(name: str, most: int) -> str:
    return name if len(name) <= most else name[: most - 1] + "…"
