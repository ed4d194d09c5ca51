"""Bar charts of the benchmark report and the Evaluate tab: every bar carries its value."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.charts import CROWDED_BARS, grouped_bar_chart, label_bars  # noqa: E402


def test_each_bar_is_labelled_with_its_value_or_na():
    fig, ax = plt.subplots()
    try:
        values = [0.2134, None, 0.5]
        bars = ax.bar(range(3), [0.0 if v is None else v for v in values])
        label_bars(ax, bars, values, n_bars=3)
        assert [t.get_text() for t in ax.texts] == ["0.21", "n/a", "0.50"]
        assert {t.get_rotation() for t in ax.texts} == {0.0}
        crowded = ax.bar(range(3), [0.1, 0.2, 0.3])
        label_bars(ax, crowded, [0.1, 0.2, 0.3], n_bars=CROWDED_BARS + 1)  # many bars: labels stand upright
        assert {t.get_rotation() for t in ax.texts[3:]} == {90.0}
    finally:
        plt.close(fig)


def test_grouped_chart_writes_a_png(tmp_path):
    path = grouped_bar_chart(tmp_path / "c.png", "by language", ["en", "hi"], {"WER": [0.2, None], "CER": [0.1, 0.3]},
                             ylim=(0, 1))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
