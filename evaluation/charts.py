"""PNG bar charts for benchmark reports (matplotlib, Agg backend: no display needed).

    from evaluation.charts import ci_bar_chart, grouped_bar_chart
    grouped_bar_chart("out/charts/by_language.png", "Intelligibility by language",
                      ["en", "hi"], {"WER": [0.21, 0.35], "GCER": [0.08, 0.12]}, ylabel="error rate")
    ci_bar_chart("out/scores.png", "Mean score, 95 % CI", ["espeak", "tiny"], [3.1, 2.4], [2.8, 2.0], [3.4, 2.8])
    matrix_chart("out/win_rate.png", "Win rate of row over column", ["a", "b"], [[nan, 0.6], [0.4, nan]], "{:.2f}")

Not a CLI; used by `python -m evaluation.run`, the campaign results (`webapp.campaign`) and the arena's
leaderboard (`evaluation.arena.leaderboard`), tested through tests/evaluation/test_run.py,
tests/app/test_campaign_results.py and tests/evaluation/arena/.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURE_HEIGHT_IN = 4.0
MIN_FIGURE_WIDTH_IN = 5.0
MAX_FIGURE_WIDTH_IN = 16.0
WIDTH_PER_BAR_IN = 0.22
TITLE_WRAP_CHARS = 60
TITLE_FONT_SIZE = 10
GROUP_WIDTH = 0.8  # share of the x-slot covered by one group's bars
DPI = 120
LABEL_DIGITS = 2  # value labels on the bars
LABEL_FONT_SIZE = 7
LABEL_PADDING_PT = 1.5
LABEL_HEADROOM = 0.12  # share of the y range kept free above the bars for their labels
CROWDED_BARS = 24  # more bars than this: labels turned upright
MISSING_LABEL = "n/a"


def label_bars(ax, bars, values: Sequence[float | None], n_bars: int, inside: bool = False) -> None:
    """Write each bar's value above it ("n/a" for a missing one): 2 decimals, turned upright
    and smaller when the chart holds many bars, so neighbours do not overlap. `inside` puts
    it in the bar's middle instead (bars with an error bar above them)."""
    crowded = n_bars > CROWDED_BARS
    labels = [MISSING_LABEL if v is None else f"{v:.{LABEL_DIGITS}f}" for v in values]
    ax.bar_label(bars, labels=labels, padding=0 if inside else LABEL_PADDING_PT, rotation=90 if crowded else 0,
                 fontsize=LABEL_FONT_SIZE - 1 if crowded else LABEL_FONT_SIZE,
                 label_type="center" if inside else "edge", color="white" if inside else None)
    if not inside:
        ax.margins(y=LABEL_HEADROOM)  # room above the tallest bar for its label


def grouped_bar_chart(path: str | os.PathLike, title: str, groups: Sequence[str],
                      series: Mapping[str, Sequence[float | None]], ylabel: str = "",
                      ylim: tuple[float, float] | None = None) -> Path:
    """One bar per (group, series), its value written above it; groups with no value at all
    are left out (noted in the title), single None values are drawn as 0 and labelled "n/a".
    Returns the PNG path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = [i for i in range(len(groups)) if any(v[i] is not None for v in series.values())]
    if len(keep) < len(groups):
        title = f"{title} ({len(groups) - len(keep)} group(s) without scores left out)"
    groups = [groups[i] for i in keep]
    series = {name: [values[i] for i in keep] for name, values in series.items()}
    width = min(MAX_FIGURE_WIDTH_IN,
                max(MIN_FIGURE_WIDTH_IN, WIDTH_PER_BAR_IN * len(groups) * max(1, len(series)) + 2))
    fig, ax = plt.subplots(figsize=(width, FIGURE_HEIGHT_IN))
    try:
        n = max(1, len(series))
        bar = GROUP_WIDTH / n
        for k, (name, values) in enumerate(series.items()):
            xs = [i - GROUP_WIDTH / 2 + bar * (k + 0.5) for i in range(len(groups))]
            bars = ax.bar(xs, [0.0 if v is None else v for v in values], width=bar, label=name)
            label_bars(ax, bars, values, n_bars=len(groups) * n)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=45 if len(groups) > 8 else 0, ha="right" if len(groups) > 8 else "center")
        if ylim is not None:  # kept, plus headroom for the labels of bars that reach the top
            ylim = (ylim[0], ylim[1] + LABEL_HEADROOM * (ylim[1] - ylim[0]))
        if len(series) > 1:
            ax.legend()
        _finish(fig, ax, path, title, ylabel, ylim)
    finally:
        plt.close(fig)
    return path


def ci_bar_chart(path: str | os.PathLike, title: str, labels: Sequence[str], means: Sequence[float | None],
                 lows: Sequence[float | None], highs: Sequence[float | None], ylabel: str = "",
                 ylim: tuple[float, float] | None = None, reference: float | None = None) -> Path:
    """One bar per label with its confidence interval as an error bar (bars without a value are
    left out; a bar without an interval has no error bar); `reference` draws a dashed line
    (e.g. 0.5 for a win rate). Returns the PNG path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = [i for i, m in enumerate(means) if m is not None]
    labels = [textwrap.shorten(labels[i], 40) for i in keep]
    width = min(MAX_FIGURE_WIDTH_IN, max(MIN_FIGURE_WIDTH_IN, 1.2 * len(keep) + 2))
    fig, ax = plt.subplots(figsize=(width, FIGURE_HEIGHT_IN))
    try:
        xs = list(range(len(keep)))
        ys = [means[i] for i in keep]
        below = [means[i] - lows[i] if lows[i] is not None else 0.0 for i in keep]
        above = [highs[i] - means[i] if highs[i] is not None else 0.0 for i in keep]
        bars = ax.bar(xs, ys, width=GROUP_WIDTH / 1.5, yerr=[below, above], capsize=6, color="#4c72b0")
        label_bars(ax, bars, ys, n_bars=len(keep), inside=True)  # inside: the interval is drawn above
        if reference is not None:
            ax.axhline(reference, linestyle="--", color="grey", linewidth=1)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=20 if len(keep) > 3 else 0, ha="right" if len(keep) > 3 else "center")
        _finish(fig, ax, path, title, ylabel, ylim)
    finally:
        plt.close(fig)
    return path


def matrix_chart(path: str | os.PathLike, title: str, labels: Sequence[str], matrix, fmt: str = "{:.2f}",
                 cmap: str = "RdBu") -> Path:
    """A square matrix [K, K] (rows and columns in `labels` order) as a heat map with each cell's value
    written in it (`fmt`); NaN cells are left blank. Returns the PNG path."""
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.asarray(matrix, dtype=float)
    labels = [textwrap.shorten(label, 24) for label in labels]
    side = min(MAX_FIGURE_WIDTH_IN, max(MIN_FIGURE_WIDTH_IN, 0.7 * len(labels) + 2.5))
    fig, ax = plt.subplots(figsize=(side, side * 0.85))
    try:
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap)
        fig.colorbar(image, ax=ax, shrink=0.8)
        for (row, column), value in np.ndenumerate(values):
            if np.isfinite(value):
                ax.text(column, row, fmt.format(value), ha="center", va="center", fontsize=LABEL_FONT_SIZE + 1)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_title(textwrap.fill(title, TITLE_WRAP_CHARS), fontsize=TITLE_FONT_SIZE)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


def _finish(fig, ax, path: Path, title: str, ylabel: str, ylim: tuple[float, float] | None) -> None:
    """Title, axis label, limits and grid every chart shares, then the PNG."""
    ax.set_title(textwrap.fill(title, TITLE_WRAP_CHARS), fontsize=TITLE_FONT_SIZE)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
