"""The benchmark runner's outputs: clips.csv, summary.csv, charts and report.md (docs/ARCHITECTURE.md §8).

Library module of `evaluation.run` (its command line writes them)::

    from evaluation.run_report import write_outputs
    report = write_outputs(out, system, judge, args_line, prompts_path, runs, seed, counts, rows, summary,
                           verdicts, agg, segmentation, normalize, judges)

rows and summary come from `evaluation.run.score_all`; `judges` (the DNSMOS and speaker
judges, `evaluation.acoustic.AcousticJudges`, or None) add their columns and a section; the
watermark detector's columns (`evaluation.watermark`) are always there, with a section.
"""

from __future__ import annotations

import time
from pathlib import Path

from evaluation import nova
from evaluation.acoustic import AcousticJudges, report_lines, summary_columns
from evaluation.asr_judge import ASRJudge
from evaluation.charts import grouped_bar_chart
from evaluation.report import markdown_table, write_csv, write_jsonl
from evaluation.systems import Synthesizer
from evaluation.text import (
    DEFAULT_SEGMENTATION,
    SEGMENTATIONS,
    normalizer_info,
    segmentation_label,
    segmentation_unicode_version,
)
from evaluation.watermark import CLIP_COLUMNS as WATERMARK_COLUMNS
from evaluation.watermark import SUMMARY_COLUMNS as WATERMARK_SUMMARY
from evaluation.watermark import THRESHOLD

MANIFEST, TRANSCRIPTS, REPORT = "manifest.jsonl", "transcripts.jsonl", "report.md"
CLIPS_CSV, SUMMARY_CSV, NOVA_JSONL, NOVA_CSV = "clips.csv", "summary.csv", "nova_verdicts.jsonl", "nova.csv"
CHARTS_DIR = "charts"
MAX_REPORT_CLIPS = 300
REPORT_TEXT_CHARS = 80
RATE_KEYS = (("wer", "word"), ("cer", "char"), ("gcer", "grapheme"))  # gcer: the chosen segmentation
CLUSTER_RATE_KEYS = tuple((f"gcer_{seg}", f"clusters_{seg}") for seg in SEGMENTATIONS)  # GCER under each


def gcer_headers(segmentation: str) -> list[str]:
    """Markdown headers of the side-by-side GCER columns; the chosen segmentation in bold."""
    names = [f"GCER {seg} (U{segmentation_unicode_version(seg)})" for seg in SEGMENTATIONS]
    return [f"**{n}**" if seg == segmentation else n for seg, n in zip(SEGMENTATIONS, names, strict=True)]


def watermark_text(summary_row: dict) -> str:
    """"3 of 4 clips (75%)": how many of a group's clips with audio carry the watermark."""
    fraction = summary_row.get("watermarked_fraction")
    if fraction is None:
        return "no clip with audio"
    return f"{summary_row['watermarked_clips']} of {summary_row['watermark_scored']} clips ({fraction:.0%})"


def watermark_lines(summary: list[dict]) -> list[str]:
    """The report's section on the watermark detector: the watermarked share overall and per run."""
    rows = [[s["group"] if s["level"] != "overall" else "all", watermark_text(s)] for s in summary
            if s["level"] in ("overall", "run")]
    return ["## Watermark", "", "Every clip with audio scored by the PerthNet detector (`evaluation.watermark`, "
            f"docs/watermark.md); a score of {THRESHOLD} or more is watermarked. The engines mark library voices' "
            "audio by default (`--watermark`); `watermark_score` per clip is in clips.csv.", "",
            markdown_table(["run", "watermarked"], rows), ""]


def _short(text: str | None) -> str:
    text = "" if text is None else " ".join(str(text).split())
    return text if len(text) <= REPORT_TEXT_CHARS else text[:REPORT_TEXT_CHARS - 1] + "…"


def write_outputs(out: Path, system: Synthesizer, judge: ASRJudge, args_line: str, prompts_path: str, runs: int,
                  seed: int, counts: dict, rows: list[dict], summary: list[dict], verdicts: list[dict],
                  agg: nova.NovaAggregate | None, segmentation: str = DEFAULT_SEGMENTATION,
                  normalize: bool = True, judges: AcousticJudges | None = None) -> Path:
    """CSV files, charts and report.md; returns the report path. judges: the audio judges of the
    run (their columns and section), or None."""
    judges = judges or AcousticJudges()
    audio_cols = judges.columns() if judges.active else []
    gcer_cols = ["gcer", "gcer_segmentation", *(rate for rate, _ in CLUSTER_RATE_KEYS), "gcer_rules"]
    clip_cols = ["run", "id", "language", "domain", "duration", "wer", "cer", *gcer_cols, "content_error",
                 "word_errors", "word_ref_len", "char_errors", "char_ref_len", "grapheme_errors",
                 "grapheme_ref_len", *(f"{unit}_{n}" for _, unit in CLUSTER_RATE_KEYS for n in ("errors", "ref_len")),
                 *audio_cols, *WATERMARK_COLUMNS, "ref", "ref_spoken", "hyp", "error"]
    write_csv(out / CLIPS_CSV, clip_cols, [[r.get(c) for c in clip_cols] for r in rows])
    sum_cols = ["level", "group", "clips", "scored", "failed", "wer", "cer", *gcer_cols, "mean_duration",
                *summary_columns(summary), *WATERMARK_SUMMARY]
    write_csv(out / SUMMARY_CSV, sum_cols, [[s.get(c) for c in sum_cols] for s in summary])
    charts = []
    for level in ("language", "domain"):
        groups = [s for s in summary if s["level"] == level]
        if groups:
            charts.append(grouped_bar_chart(out / CHARTS_DIR / f"by_{level}.png",
                                            f"{system.label}: error rates by {level} ({judge.name})",
                                            [s["group"] for s in groups],
                                            {"WER": [s["wer"] for s in groups], "CER": [s["cer"] for s in groups],
                                             **{f"GCER {seg}": [s[f"gcer_{seg}"] for s in groups]
                                                for seg in SEGMENTATIONS}},
                                            ylabel="corpus error rate"))
    if agg is not None:
        write_jsonl(out / NOVA_JSONL, verdicts)
        write_csv(out / NOVA_CSV, agg.csv_headers(), agg.csv_rows())
        x = agg.listeners[0]
        charts.append(grouped_bar_chart(out / CHARTS_DIR / "nova.png", f"{system.label}: NoVA rendered rate",
                                        ["laughter", "sigh", "laugh", "chuckle"],
                                        {"rendered": [x.laughter, x.sigh, x.rendered["laugh"], x.rendered["chuckle"]]},
                                        ylabel="rendered at the requested word", ylim=(0, 1)))
    overall = summary[0]
    lines = [
        f"# Benchmark report: {system.label}", "",
        f"- System: **{system.label}** (`{system.name}`)",
        f"- ASR judge: `{judge.name}`",
        f"- Prompts: `{prompts_path}` ({len({r['id'] for r in rows})} prompts) x {runs} run(s), base seed {seed}",
        f"- Command: `{args_line}`",
        f"- GCER: the `gcer` CSV column and the content error use the **{segmentation}** segmentation "
        f"(`--gcer-segmentation`); the tables show both, the chosen one in bold:",
        *(f"  - {segmentation_label(seg)}" for seg in SEGMENTATIONS),
        f"- Normaliser: {normalizer_info()}",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- Clips: {overall['clips']} ({counts['synthesized']} synthesised now, {counts['kept']} kept from an "
        f"earlier run, {counts['failed']} failed at synthesis); scored {overall['scored']}, "
        f"failed {overall['failed']} (listed below, left out of the rates)", "",
        "Rates are corpus-pooled (summed edit errors / summed reference length) after the shared normaliser "
        "(`evaluation.text.normalize`). GCER is the content metric for Indic scripts, WER for Latin.", "",
        ("References and transcripts are compared in spoken form: numbers, money, dates and times were "
         "turned into words with `rumik_app.normalize.normalize_text` in the prompt's language (the text the "
         "system was asked to read; `ref_spoken` in clips.csv) before scoring." if normalize else
         "Text normalisation was off (`--no-normalize`): systems read and references are scored as typed, "
         "digits included."), "",
    ]
    table_cols = ["clips", "scored", "failed", "wer", "cer", *(rate for rate, _ in CLUSTER_RATE_KEYS), "mean_duration"]
    table_headers = ["clips", "scored", "failed", "WER", "CER", *gcer_headers(segmentation), "mean duration (s)"]
    for level, title in (("overall", "Overall"), ("language", "By language"), ("domain", "By domain"),
                         ("run", "By run")):
        part = [s for s in summary if s["level"] == level]
        lines += [f"## {title}", "", markdown_table([level if level != "overall" else "", *table_headers],
                                                    [[s["group"], *(s[c] for c in table_cols)] for s in part]), ""]
    lines += [f"![by language]({CHARTS_DIR}/by_language.png)", f"![by domain]({CHARTS_DIR}/by_domain.png)", ""]
    lines += report_lines(judges, summary)
    lines += watermark_lines(summary)
    if agg is not None:
        lines += [agg.markdown(), "", "Clips that failed count as not rendered; ASR failures are listener errors."]
        if not any(v.get("hyp_tags") for v in verdicts):
            lines += ["", f"No transcript contains a tag: `{judge.name}` may not transcribe vocalisations at all "
                      "(pocketsphinx never does), so these rates say nothing about the system. Use a tag-aware "
                      "listener, e.g. transcripts with inline tags via `--asr supplied:PATH.jsonl`."]
        lines += ["", f"![NoVA]({CHARTS_DIR}/nova.png)", ""]
    failed = [r for r in rows if r["error"] is not None]
    lines += ["## Per-clip errors", ""]
    lines += [markdown_table(["run", "id", "error"], [[r["run"], r["id"], r["error"]] for r in failed])
              if failed else "None.", ""]
    shown = rows[:MAX_REPORT_CLIPS]
    lines += ["## Per clip", "", markdown_table(
        ["run", "id", "lang", "domain", "dur (s)", "WER", "CER", *gcer_headers(segmentation),
         "reference (spoken form)" if normalize else "reference", "transcript"],
        [[r["run"], r["id"], r["language"], r["domain"], r["duration"], r.get("wer"), r.get("cer"),
          *(r.get(rate) for rate, _ in CLUSTER_RATE_KEYS),
          _short(r["ref_spoken"]), _short(r["hyp"]) if r["error"] is None else "(error)"] for r in shown])]
    if len(rows) > len(shown):
        lines.append(f"\n({len(rows) - len(shown)} more clips in {CLIPS_CSV}.)")
    report = out / REPORT
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report
