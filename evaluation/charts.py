"""PNG bar charts for benchmark reports (matplotlib, Agg backend: no display needed).

    from evaluation.charts import grouped_bar_chart
    grouped_bar_chart("out/charts/by_language.png", "Intelligibility by language",
                      ["en", "hi"], {"WER": [0.21, 0.35], "GCER": [0.08, 0.12]}, ylabel="error rate")

Not a CLI; used by `python -m evaluation.run` and tested through tests/evaluation/test_run.py.
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


def grouped_bar_chart(path: str | os.PathLike, title: str, groups: Sequence[str],
                      series: Mapping[str, Sequence[float | None]], ylabel: str = "",
                      ylim: tuple[float, float] | None = None) -> Path:
    """One bar per (group, series); groups with no value at all are left out (noted in the
    title), single None values are drawn as 0. Returns the PNG path."""
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
            ax.bar(xs, [0.0 if v is None else v for v in values], width=bar, label=name)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=45 if len(groups) > 8 else 0, ha="right" if len(groups) > 8 else "center")
        ax.set_title(textwrap.fill(title, TITLE_WRAP_CHARS), fontsize=TITLE_FONT_SIZE)
        ax.set_ylabel(ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if len(series) > 1:
            ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path
