"""Inline SVG charts for the HTML report, drawn in plain Python (no plotting library, no script).

Why hand-made: the page must open offline and stay one file, and ``gpuopt report`` must not pay
for importing matplotlib or plotly. Three charts are enough: stacked per-step bars, a time line
chart with axes, and a 100% stacked bar. Every label passes through :func:`esc`; data only ever
lands in text nodes and quoted attribute values, never in element or attribute names.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuopt.report import common as c

COLORS = {
    "data_wait": "#e4572e",
    "h2d": "#a05195",
    "sync": "#f3a712",
    "compute": "#2a9d5c",
    "other": "#9aa0a6",
    "rest": "#7cc49c",  # compute + other, where only the total is known per step
    "cpu": "#3b6fd8",
    "gpu": "#2a9d5c",
    "rss_bytes": "#3b6fd8",
    "gpu_memory_bytes": "#2a9d5c",
}
FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'


def esc(value: Any) -> str:
    return html.escape(c.text(value), quote=True)


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
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if top >= scale or unit == "ns":
            return lambda t: "0" if t == 0 else f"{t / scale:g} {unit}"
    return lambda t: f"{t:g} s"  # pragma: no cover


def _svg_open(width: int, height: int, label: str) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{esc(label)}" {FONT} font-size="12">'
    )


@dataclass
class StepBar:
    """One bar: a step (or the mean of a bucket of steps)."""

    label: str
    parts: list[tuple[str, float]]  # (color key, seconds), bottom to top
    warmup: bool


def step_bars(series: list[dict[str, Any]], max_bars: int = 400) -> tuple[list[StepBar], int]:
    """Bars for the per-step chart and how many steps each measured bar stands for (1 = one
    step). Warm-up steps stay single (they are few); measured steps are averaged in buckets only
    when there are more than ``max_bars``."""
    keys = ("data_wait_s", "h2d_s", "sync_s", "rest_s")
    colors = ("data_wait", "h2d", "sync", "rest")
    warm = [r for r in series if r["warmup"]]
    measured = [r for r in series if not r["warmup"]]
    per = max(1, math.ceil(len(measured) / max(1, max_bars - len(warm))))
    bars = [
        StepBar(
            f"step {r['index']} (warm-up)",
            [(col, r[k]) for col, k in zip(colors, keys, strict=True)],
            True,
        )
        for r in warm
    ]
    for i in range(0, len(measured), per):
        group = measured[i : i + per]
        if per == 1:
            label = f"step {group[0]['index']}"
        else:
            label = f"steps {group[0]['index']}–{group[-1]['index']} (mean)"
        bars.append(
            StepBar(
                label,
                [
                    (col, sum(r[k] for r in group) / len(group))
                    for col, k in zip(colors, keys, strict=True)
                ],
                False,
            )
        )
    return bars, per


def step_chart(series: list[dict[str, Any]], width: int = 1100, height: int = 260) -> str:
    """Stacked per-step bars (data wait, copies, syncs, rest) with warm-up steps shaded. The
    y scale fits the measured steps; a taller bar (usually warm-up) is cut and marked ▲."""
    bars, per = step_bars(series)
    if not bars:
        return ""
    left, right, top, bottom = 64, 12, 22, 34
    pw, ph = width - left - right, height - top - bottom
    totals = [sum(v for _, v in b.parts) for b in bars]
    measured_tot = [t for t, b in zip(totals, bars, strict=True) if not b.warmup] or totals
    y_hi = max(measured_tot) * 1.08 or 1.0
    ticks = nice_ticks(y_hi, 4)
    y_hi = ticks[-1]
    slot = pw / len(bars)
    bw = max(1.0, slot * 0.8) if slot >= 3 else slot
    out = [_svg_open(width, height, "step time per step, stacked by cause")]
    n_warm = sum(1 for b in bars if b.warmup)
    if n_warm:
        wx = left + n_warm * slot
        out.append(
            f'<rect x="{left}" y="{top}" width="{wx - left:.1f}" height="{ph}" fill="currentColor" opacity="0.07"/>'
        )
        out.append(
            f'<text x="{left + 2}" y="{height - 3}" fill="currentColor" opacity="0.8">◀ warm-up</text>'
            if n_warm * slot < 60
            else f'<text x="{(left + wx) / 2:.1f}" y="{height - 3}" text-anchor="middle" fill="currentColor" opacity="0.8">warm-up</text>'
        )
    tick_label = duration_tick_formatter(y_hi)
    for t in ticks:
        y = top + ph - t / y_hi * ph
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="currentColor" opacity="0.12"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor">{esc(tick_label(t))}</text>'
        )
    for i, (bar, total) in enumerate(zip(bars, totals, strict=True)):
        x = left + i * slot + (slot - bw) / 2
        y = top + ph
        detail = ", ".join(f"{_PART_LABEL[k]} {c.fmt_duration(v)}" for k, v in bar.parts if v > 0)
        out.append(
            f'<g opacity="{0.45 if bar.warmup else 1}"><title>{esc(bar.label)}: {esc(c.fmt_duration(total))} ({esc(detail)})</title>'
        )
        for key, v in bar.parts:
            h = min(v, max(0.0, y_hi - (top + ph - y) / ph * y_hi)) / y_hi * ph
            if h <= 0:
                continue
            y -= h
            out.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{h:.2f}" fill="{COLORS[key]}"/>'
            )
        if total > y_hi:
            out.append(
                f'<text x="{x + bw / 2:.1f}" y="{top - 2}" text-anchor="middle" font-size="9" fill="currentColor">▲</text>'
            )
        out.append("</g>")
    out.append(
        f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="currentColor" opacity="0.5"/>'
    )
    # x labels: first, a few in between, last
    idx_ticks = sorted({0, len(bars) - 1, *range(0, len(bars), max(1, len(bars) // 8))})
    for i in idx_ticks:
        if 0 < i < len(bars) - 1 and (len(bars) - 1 - i) < max(1, len(bars) // 16):
            continue  # too close to the last label
        x = left + (i + 0.5) * slot
        label = bars[i].label.split(" ")[1].split("–")[0]
        out.append(
            f'<text x="{x:.1f}" y="{top + ph + 15}" text-anchor="middle" fill="currentColor">{esc(label)}</text>'
        )
    axis = "step" if per == 1 else f"step (measured bars: mean of {per} steps)"
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 3}" text-anchor="middle" fill="currentColor" opacity="0.8">{esc(axis)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


_PART_LABEL = {
    "data_wait": "data wait",
    "h2d": "copies",
    "sync": "syncs",
    "rest": "compute + other",
}


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
    left, right, top, bottom = 64, 12, 24, 34
    pw, ph = width - left - right, height - top - bottom
    t0, t1 = t_s[0], t_s[-1]
    span = (t1 - t0) or 1.0
    yticks = nice_ticks(y_hi, 4)
    y_top = yticks[-1] or 1.0
    xticks = [t for t in nice_ticks(span, 8) if t <= span + 1e-9]
    out = [_svg_open(width, height, label)]
    for t in yticks:
        y = top + ph - t / y_top * ph
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="currentColor" opacity="0.12"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor">{esc(y_fmt(t))}</text>'
        )
    for t in xticks:
        x = left + t / span * pw
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="currentColor" opacity="0.5"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle" fill="currentColor">{esc(_fmt_seconds_tick(t))}</text>'
        )
    out.append(
        f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="currentColor" opacity="0.5"/>'
    )
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 3}" text-anchor="middle" fill="currentColor" opacity="0.8">time since start (s)</text>'
    )
    step = max(1, math.ceil(len(t_s) / max_points))
    lx = left
    for key, name, values in lines:
        segments: list[list[str]] = [[]]
        for i in range(0, len(t_s), step):
            chunk = [v for v in values[i : i + step] if v is not None]
            if not chunk:
                if segments[-1]:
                    segments.append([])
                continue
            v = sum(chunk) / len(chunk)
            x = left + (t_s[i] - t0) / span * pw
            y = top + ph - min(max(v, 0.0), y_top) / y_top * ph
            segments[-1].append(f"{x:.1f},{y:.1f}")
        color = COLORS.get(key, "#555")
        for seg in segments:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{color}"/>')
            elif seg:
                out.append(
                    f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" stroke-width="1.6" stroke-linejoin="round"/>'
                )
        out.append(
            f'<rect x="{lx}" y="6" width="12" height="4" fill="{color}"/><text x="{lx + 16}" y="12" fill="currentColor">{esc(name)}</text>'
        )
        lx += 24 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


def _fmt_seconds_tick(t: float) -> str:
    return f"{t:.0f}" if float(t).is_integer() or t >= 10 else f"{t:g}"


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
            f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{COLORS.get(key, "#888")}"><title>{esc(name)} {esc(c.fmt_frac(frac))}</title></rect>'
        )
        text = f"{name} {c.fmt_frac(frac)}"
        if w > 7.2 * len(text) + 10:
            out.append(
                f'<text x="{x + w / 2:.1f}" y="{height / 2 + 4:.1f}" text-anchor="middle" fill="#fff" font-weight="600">{esc(text)}</text>'
            )
        elif w > 7.2 * len(c.fmt_frac(frac)) + 8:
            out.append(
                f'<text x="{x + w / 2:.1f}" y="{height / 2 + 4:.1f}" text-anchor="middle" fill="#fff" font-weight="600">{esc(c.fmt_frac(frac))}</text>'
            )
        x += w
    out.append("</svg>")
    return "".join(out)


def rank_bars(
    rows: list[tuple[str, float | None, list[tuple[str, str, float]]]], width: int = 1100
) -> str:
    """One horizontal bar per rank, its length the rank's step median and its segments the
    rank's breakdown: a straggler is the long bar, and its colours say why."""
    rows = [r for r in rows if r[1] is not None and r[1] > 0]
    if not rows:
        return ""
    label_w, bar_h, gap = 70, 18, 8
    longest = max(r[1] for r in rows if r[1] is not None)
    pw = width - label_w - 90
    height = len(rows) * (bar_h + gap) + 6
    out = [_svg_open(width, height, "step median and breakdown per rank")]
    for i, (name, median, items) in enumerate(rows):
        assert median is not None
        y = 3 + i * (bar_h + gap)
        out.append(
            f'<text x="{label_w - 8}" y="{y + bar_h - 5}" text-anchor="end" fill="currentColor">{esc(name)}</text>'
        )
        total = sum(f for _, _, f in items) or 1.0
        length = median / longest * pw
        x = float(label_w)
        for key, seg_name, frac in items:
            w = frac / total * length
            if w <= 0:
                continue
            out.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{COLORS.get(key, "#888")}"><title>{esc(name)}: {esc(seg_name)} {esc(c.fmt_frac(frac))}</title></rect>'
            )
            x += w
        if not items:
            out.append(
                f'<rect x="{x:.2f}" y="{y}" width="{length:.2f}" height="{bar_h}" fill="{COLORS["other"]}"/>'
            )
        out.append(
            f'<text x="{label_w + length + 6:.1f}" y="{y + bar_h - 5}" fill="currentColor">{esc(c.fmt_duration(median))}</text>'
        )
    out.append("</svg>")
    return "".join(out)
