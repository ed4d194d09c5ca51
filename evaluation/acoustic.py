"""Audio judges in the benchmark runner: DNSMOS quality, speaker similarity to the voice reference
and long-form speaker drift, per clip, pooled with bootstrap CIs (docs/ARCHITECTURE.md §8).

Library module of `evaluation.run` (`--quality`, `--speaker`, `--speaker-ref CLIP`)::

    from evaluation.acoustic import AcousticJudges, pool, score_clips
    judges = AcousticJudges(quality=DNSMOS(), speaker=encoder, references=VoiceReferences(encoder, system=system))
    values = score_clips(judges, prompts, manifest, out)   # {(run, id): {"dnsmos_ovrl": 3.1, "speaker_sim": 0.82, ...}}
    pooled = pool(rows)                                    # {"dnsmos_ovrl": mean, "dnsmos_ovrl_ci_low": ..., ...}

Per clip: `dnsmos_ovrl`, `dnsmos_sig`, `dnsmos_bak` (evaluation.quality; P.835 only, P.808 is skipped),
`speaker_sim` (cosine with the reference of the prompt's voice, evaluation.voice_ref),
and for a clip synthesised in several chunks (the engine's `plan()`, whose spans the
manifest keeps as `chunks`) `speaker_drift`: the lowest similarity of a later chunk to the
first, with every chunk's in `speaker_drift_chunks`. A clip the judges cannot score gets
`acoustic_error` and is left out of the means. Values are kept in OUT/acoustic.jsonl and reused
on a rerun while the clip's sha256 and the judges are the same.

Each clip file is decoded once at its own rate (`evaluation.audio_io.load_native`) and each judge
converts it once, straight to its own rate (16 kHz for both), with the one resampler (soxr HQ) as
their reference pipelines do (tests/evaluation/test_resample_reference.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from evaluation.audio_io import LOCAL_MAX_SECONDS, load_native
from evaluation.listening_stats import Estimate, bootstrap_mean
from evaluation.report import markdown_table, read_jsonl, write_jsonl
from evaluation.speaker import SpeakerEncoder, cosine
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.errors import RumikError
from rumik_app.request import DEFAULT_VOICE
from rumik_app.resample import QUALITY as RESAMPLE_QUALITY

CACHE = "acoustic.jsonl"
QUALITY_COLUMNS = ("dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak")
SPEAKER_COLUMNS = ("speaker_sim", "speaker_drift")
COLUMNS = QUALITY_COLUMNS + SPEAKER_COLUMNS
CLIP_COLUMNS = COLUMNS + ("speaker_drift_chunks", "acoustic_error")
HEADERS = {"dnsmos_ovrl": "DNSMOS OVRL", "dnsmos_sig": "DNSMOS SIG", "dnsmos_bak": "DNSMOS BAK",
           "speaker_sim": "speaker sim", "speaker_drift": "speaker drift"}
BATCH_CLIPS = 16  # clips per judge call
# How clips reach the judges' rates; in the cache signature, so values from another pipeline are recomputed.
LOADING = f"native file rate -> judge rate, soxr {RESAMPLE_QUALITY}"
MIN_CHUNK_SECONDS = 0.5  # a shorter chunk holds too little voice to embed


@dataclass
class AcousticJudges:
    """The audio judges of one run; either may be None. references: `VoiceReferences` (needed with speaker)."""

    quality: object | None = None
    speaker: SpeakerEncoder | None = None
    references: object | None = None

    @property
    def active(self) -> bool:
        return self.quality is not None or self.speaker is not None

    def signature(self) -> str:
        """What the cached values depend on besides the clip."""
        quality = getattr(self.quality, "name", None)
        speaker = None if self.speaker is None else f"{self.speaker.name} vs {self.references.source}"
        return json.dumps({"quality": quality, "speaker": speaker, "loading": LOADING}, sort_keys=True)

    def columns(self) -> list[str]:
        """The per-clip columns these judges fill, in CSV order."""
        cols = list(QUALITY_COLUMNS) if self.quality is not None else []
        if self.speaker is not None:
            cols += [*SPEAKER_COLUMNS, "speaker_drift_chunks"]
        return cols + ["acoustic_error"]


def add_arguments(parser) -> None:
    """The runner's flags for these judges."""
    parser.add_argument("--quality", action="store_true", help="score every clip with DNSMOS (dnsmos_ovrl, "
                        "dnsmos_sig, dnsmos_bak columns; offline, models from the speechmos package)")
    parser.add_argument("--quality-max-windows", type=int, default=None, metavar="K",
                        help="DNSMOS on each clip's first K 9 s windows only (default: all, as speechmos; "
                        "K=1 is up to ~5x faster on 3-9 s clips, which speechmos tiles into up to 7 windows)")
    parser.add_argument("--speaker", action="store_true", help="speaker similarity to the voice reference "
                        "(speaker_sim) and, for clips in several chunks, speaker_drift")
    parser.add_argument("--speaker-ref", default=None, help="an audio file as the reference for every voice "
                        "(default: each voice as the system itself speaks fixed sentences; implies --speaker)")
    parser.add_argument("--speaker-encoder", default="resemblyzer",
                        help="resemblyzer (default, offline) or hf:MODEL_ID_OR_PATH (a WavLM x-vector model)")


def load_judges(args, system) -> AcousticJudges:
    """The judges the flags ask for, loaded now (so a missing model fails before any synthesis)."""
    from evaluation.quality import DNSMOS
    from evaluation.speaker import load_speaker_encoder
    from evaluation.voice_ref import VoiceReferences

    judges = AcousticJudges()
    if args.quality:
        judges.quality = DNSMOS(device=None if args.device in (None, "auto") else args.device, p808=False,
                                max_windows=args.quality_max_windows)
    if args.speaker or args.speaker_ref:
        judges.speaker = load_speaker_encoder(args.speaker_encoder, args.device)
        judges.references = (VoiceReferences(judges.speaker, clip=args.speaker_ref) if args.speaker_ref
                             else VoiceReferences(judges.speaker, system=system))
    return judges


def clip_values(judges: AcousticJudges, prompts: list[dict], manifest: list[dict],
                out: Path) -> dict[tuple[int, str], dict]:
    """Every clip's acoustic columns (None where not scored): `score_clips` plus the blanks."""
    if not judges.active:
        return {}
    values = score_clips(judges, prompts, manifest, out)
    blank = dict.fromkeys(judges.columns())
    return {(r["run"], r["id"]): {**blank, **values.get((r["run"], r["id"]), {})} for r in manifest}


def _quality_values(judges: AcousticJudges, audio: list[Audio]) -> list[dict]:
    scores = judges.quality.score(audio)  # each clip at its own rate, converted once to 16 kHz
    return [{"dnsmos_ovrl": s.ovrl, "dnsmos_sig": s.sig, "dnsmos_bak": s.bak} for s in scores]


def chunk_audio(samples: np.ndarray, chunks: Sequence[Sequence[float]] | None,
                sample_rate: int = SAMPLE_RATE) -> list[np.ndarray]:
    """The pieces of a clip [N] at `sample_rate` that the manifest's `chunks` spans (seconds) name;
    empty unless there are at least two pieces of MIN_CHUNK_SECONDS."""
    pieces = [samples[int(a * sample_rate): int(b * sample_rate)] for a, b in (chunks or [])]
    pieces = [p for p in pieces if len(p) >= MIN_CHUNK_SECONDS * sample_rate]
    return pieces if len(pieces) > 1 else []


def _speaker_values(judges: AcousticJudges, audio: list[Audio], voices: list[str],
                    chunks: list[list[np.ndarray]]) -> list[dict]:
    embeddings = judges.speaker.embed(audio)
    out = []
    for emb, clip, voice, pieces in zip(embeddings, audio, voices, chunks, strict=True):
        row: dict = {"speaker_sim": cosine(judges.references.get(voice), emb)}
        if pieces:
            parts = judges.speaker.embed(pieces, clip.sample_rate)
            sims = [cosine(parts[0], p) for p in parts[1:]]
            row.update(speaker_drift=min(sims), speaker_drift_chunks=" ".join(f"{s:.4f}" for s in sims))
        out.append(row)
    return out


def _score_batch(judges: AcousticJudges, batch: list[tuple[dict, dict]], out: Path) -> list[dict]:
    """Values for a batch of (manifest record, prompt); one clip's failure is its own error."""
    try:
        audio = [load_native(out / rec["path"], max_seconds=LOCAL_MAX_SECONDS) for rec, _ in batch]  # decoded once
        values = [{} for _ in batch]
        if judges.quality is not None:
            for v, q in zip(values, _quality_values(judges, audio), strict=True):
                v.update(q)
        if judges.speaker is not None:
            voices = [p.get("voice") or DEFAULT_VOICE for _, p in batch]
            pieces = [chunk_audio(a.samples, rec.get("chunks"), a.sample_rate)
                      for a, (rec, _) in zip(audio, batch, strict=True)]
            for v, s in zip(values, _speaker_values(judges, audio, voices, pieces), strict=True):
                v.update(s)
        return values
    except RumikError as exc:
        if len(batch) > 1:  # find the clip at fault: score one by one
            return [v for item in batch for v in _score_batch(judges, [item], out)]
        return [{"acoustic_error": str(exc)}]


def score_clips(judges: AcousticJudges, prompts: list[dict], manifest: list[dict], out: Path,
                batch_size: int = BATCH_CLIPS) -> dict[tuple[int, str], dict]:
    """{(run, id): values} for every clip without an error (see the module docstring)."""
    by_id, sig = {p["id"]: p for p in prompts}, judges.signature()
    cache_path = out / CACHE
    cached = {(r["run"], r["id"]): r for r in read_jsonl(cache_path)} if cache_path.is_file() else {}
    result, todo = {}, []
    for rec in manifest:
        if rec["error"] is not None:
            continue
        old = cached.get((rec["run"], rec["id"]))
        if old and old.get("sha256") == rec["sha256"] and old.get("judges") == sig:
            result[(rec["run"], rec["id"])] = old["values"]
        else:
            todo.append(rec)
    for lo in tqdm(range(0, len(todo), batch_size), desc="audio judges", unit="batch", disable=not todo):
        batch = [(rec, by_id[rec["id"]]) for rec in todo[lo:lo + batch_size]]
        for (rec, _), values in zip(batch, _score_batch(judges, batch, out), strict=True):
            result[(rec["run"], rec["id"])] = values
    write_jsonl(cache_path, [{"run": r["run"], "id": r["id"], "sha256": r["sha256"], "judges": sig,
                              "values": result[(r["run"], r["id"])]}
                             for r in manifest if (r["run"], r["id"]) in result])
    return result


def pool(rows: list[dict]) -> dict:
    """Mean and 95 % bootstrap CI (`evaluation.listening_stats.bootstrap_mean`, over clips) of every
    acoustic column present in `rows`: `{col}`, `{col}_ci_low`, `{col}_ci_high`, `{col}_n`."""
    out: dict = {}
    for col in COLUMNS:
        values = [r[col] for r in rows if r.get(col) is not None]
        if any(col in r for r in rows):
            est = bootstrap_mean(values)
            out.update({col: est.mean, f"{col}_ci_low": est.low, f"{col}_ci_high": est.high, f"{col}_n": est.n})
    return out


def summary_columns(summary: list[dict]) -> list[str]:
    """The acoustic columns of summary.csv present in `summary`."""
    return [f"{c}{s}" for c in COLUMNS if c in summary[0] for s in ("", "_ci_low", "_ci_high", "_n")]


def report_lines(judges: AcousticJudges, summary: list[dict]) -> list[str]:
    """The report's section on the audio judges: means [95 % CI] (clips) per level."""
    cols = [c for c in COLUMNS if c in summary[0]]
    if not cols:
        return []
    lines = ["## Audio quality and speaker similarity", ""]
    if judges.quality is not None:
        lines.append(f"- Quality: `{judges.quality.name}` (DNSMOS P.835 SIG/BAK/OVRL, MOS 1-5, from the speechmos "
                     "package's models; a predictor trained on noisy human speech, not a listening test).")
    if judges.speaker is not None:
        lines.append(f"- Speaker similarity: cosine of `{judges.speaker.name}` embeddings with the reference of "
                     f"each prompt's voice ({judges.references.source}); speaker drift: for clips synthesised in "
                     "several chunks, the lowest similarity of a later chunk to the first.")
    lines += ["- Means over clips with 95 % percentile bootstrap CIs (`scipy.stats.bootstrap`, seeded).", ""]
    for level, title in (("overall", "Overall"), ("language", "By language"), ("domain", "By domain")):
        part = [s for s in summary if s["level"] == level]
        headers = [level if level != "overall" else "", *(HEADERS[c] for c in cols)]
        rows = [[s["group"], *(pooled_text(s, c) for c in cols)] for s in part]
        lines += [f"### {title}", "", markdown_table(headers, rows), ""]
    return lines


def pooled_text(summary_row: dict, col: str) -> str:
    """"3.412 [3.020, 3.771] (n=20)" from a summary row's pooled `col` columns."""
    return Estimate(*(summary_row.get(f"{col}{s}") for s in ("", "_ci_low", "_ci_high", "_n"))).text(digits=3)
