"""Benchmark runner: synthesise a prompt set N times, transcribe, score, report (docs/ARCHITECTURE.md §8).

    python -m evaluation.run --system espeak --prompts evaluation/prompts/intelligibility_en.jsonl \\
        --runs 1 --asr pocketsphinx --out results/espeak_en
    python -m evaluation.run --system rumik --prompts evaluation/prompts/intelligibility.jsonl \\
        --runs 3 --asr hf:openai/whisper-large-v3 --out results/rumik --seed 0
    python -m evaluation.run ... --gcer-segmentation unicode   # GCER over regex \\X clusters
    python -m evaluation.run ... --asr indicconformer --quality --speaker   # + DNSMOS, speaker similarity, drift
    python -m evaluation.run --system tiny ... --watermark all   # marks every clip (default: library voices only)
    rumik eval --system rumik:PATH --backend vllm --batch-size 64 ...   # on vLLM

`--gcer-segmentation` picks the clusters behind the `gcer` column and the content error
("grapheme", the default: the `grapheme` package, Unicode 13.0 rules; "unicode": regex
`\\X`, Unicode 15.1+ rules; see evaluation.metrics). The CSVs and the report carry the
GCER under both, side by side, and name the library and Unicode version behind each.
Rerunning on the same --out with the other choice only rescores (clips and cached
transcripts are kept).

Prompt lines (JSONL): `id, text, language, domain` (+ optional `voice, tone, accent, pace,
description`). NoVA lines (`text_with_mark, nvv, requested_index`) are synthesised from
`text_with_mark` and also get a tag-placement verdict (`evaluation.nova`). A missing
`language` is inferred from the script when that is unambiguous (Latin -> en).

Writes under --out:
  run<r>/<id>.wav        the clips, at the rate each system makes them (24 kHz for rumik, espeak-ng's
                         22.05 kHz, a folder clip's own): every judge reads a clip once and converts it
                         once, straight to its own rate (evaluation.audio_io); kept on a rerun (resumable)
  manifest.jsonl         id, run, path, seed, system, settings, sha256, duration, error
  transcripts.jsonl      id, run, hyp, judge, error
  clips.csv, summary.csv per clip; corpus-pooled WER/CER/GCER overall, per language/domain/run
                         (gcer, gcer_segmentation, gcer_grapheme, gcer_unicode, gcer_rules); with
                         --quality/--speaker also dnsmos_*, speaker_sim, speaker_drift and their
                         means with bootstrap CIs (evaluation.acoustic; acoustic.jsonl caches them);
                         always the watermark detector's watermark_score and verdict per clip and
                         the watermarked_fraction per group (evaluation.watermark, docs/watermark.md)
  nova_verdicts.jsonl, nova.csv   when prompts carry tags
  report.md, charts/*.png
A clip that fails (synthesis error, unreadable or silent audio, ASR error) gets its error in
the manifest and the report and is left out of the rates; the run continues.

Text normalisation (`rumik_app.text.normalize`): systems read numbers, money, dates and times as
words, and references and transcripts are scored in that spoken form (`ref_spoken`);
`--no-normalize` turns both off. The digits-and-dates set for it:
    python -m evaluation.run --system espeak --prompts evaluation/prompts/digits_dates.jsonl \
        --asr pocketsphinx --limit 10 --out results/espeak_digits
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

from evaluation import acoustic, nova, watermark
from evaluation.asr import load_asr, run_key
from evaluation.asr_judge import ASRError, ASRJudge
from evaluation.audio_io import LOCAL_MAX_SECONDS, AudioLoadError, check_audio, file_sha256, load_native
from evaluation.metrics import ErrorCounts, content_error, corpus_rate, score_pair
from evaluation.prompt_file import clip_seed, is_nova, load_prompts, prompt_request
from evaluation.report import markdown_table, read_jsonl, write_jsonl
from evaluation.run_report import (  # noqa: F401 - the output file names are part of this module's interface
    CHARTS_DIR,
    CLIPS_CSV,
    CLUSTER_RATE_KEYS,
    MANIFEST,
    NOVA_CSV,
    NOVA_JSONL,
    RATE_KEYS,
    REPORT,
    SUMMARY_CSV,
    TRANSCRIPTS,
    gcer_headers,
    watermark_text,
    write_outputs,
)
from evaluation.systems import SynthesisError, Synthesizer, load_system
from evaluation.text import DEFAULT_SEGMENTATION, SEGMENTATIONS, segmentation_source, spoken_form
from rumik_app.audio import write_wav
from rumik_app.cli_args import add_engine_arguments, add_watermark_argument, engine_options, quiet_vllm_logs
from rumik_app.errors import RumikError, report_user_error
from rumik_app.watermark.marker import shared_watermarker

DEFAULT_CACHE = "asr_cache.json"
DEFAULT_SEED, DEFAULT_BATCH = 0, 8


def _error_text(exc: BaseException) -> str:
    mine = (SynthesisError, AudioLoadError, ASRError, ValueError)
    msg = str(exc).strip() or type(exc).__name__
    return msg if isinstance(exc, mine) else f"{type(exc).__name__}: {msg}"


def _clip_record(prompt: dict, run: int, path: Path, seed: int, system: Synthesizer, out: Path,
                 error: str | None, settings: dict, chunks: list | None = None) -> dict:
    """Manifest line; reads the written clip back to check it and hash it. chunks: where each
    planned chunk lies in the clip, [[start_s, end_s], ...], when the system says (rumik)."""
    rec = {"id": prompt["id"], "run": run, "path": str(path.relative_to(out)), "seed": seed, "system": system.name,
           "settings": settings, "sha256": None, "duration": None, "error": error, "chunks": chunks}
    if error is None or path.is_file():
        try:
            clip = load_native(path, max_seconds=LOCAL_MAX_SECONDS)
            rec["sha256"], rec["duration"] = file_sha256(path), round(clip.duration, 3)
            check_audio(clip.samples, clip.sample_rate, where=f"run{run}/{prompt['id']}")
        except AudioLoadError as exc:
            rec["error"] = rec["error"] or f"audio: {exc}"
    return rec


def missing_clips(out: Path, prompts: list[dict], runs: int) -> list[tuple[int, dict]]:
    """(run, prompt) pairs whose clip is not on disk under `out` yet (what a rerun synthesises)."""
    return [(run, p) for run in range(1, runs + 1) for p in prompts
            if not (out / f"run{run}" / f"{p['id']}.wav").is_file()]


def synthesize_all(system: Synthesizer, prompts: list[dict], out: Path, runs: int, seed: int,
                   batch_size: int = DEFAULT_BATCH, max_new_tokens: int | None = None,
                   normalize: bool = True) -> tuple[list[dict], dict]:
    """Make every (run, prompt) clip that is not on disk yet; returns manifest lines and counts."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    previous = {(r["run"], r["id"]): r for r in read_jsonl(manifest_path)} if manifest_path.is_file() else {}
    records: dict[tuple[int, str], dict] = {}
    pending: list[tuple[int, dict]] = []
    for run in range(1, runs + 1):
        for p in prompts:
            path = out / f"run{run}" / f"{p['id']}.wav"
            if path.is_file():  # resume: keep the clip, re-check it
                old = previous.get((run, p["id"]), {})
                records[(run, p["id"])] = _clip_record(p, run, path, old.get("seed", clip_seed(seed, p["id"], run)),
                                                       system, out, None, old.get("settings", {}), old.get("chunks"))
            else:
                pending.append((run, p))
    counts = {"kept": len(records), "synthesized": 0, "failed": 0}
    if pending:
        system.load()  # a broken system fails here, before any clip; a finished run never loads it
    with open(manifest_path, "a", encoding="utf-8") as log, \
            tqdm(total=len(pending), desc=f"synthesising ({system.name})", unit="clip") as bar:
        for lo in range(0, len(pending), batch_size):
            chunk = pending[lo:lo + batch_size]
            by_run: dict[int, list[dict]] = defaultdict(list)
            for run, p in chunk:
                by_run[run].append(p)
            for run, group in by_run.items():
                requests, errors, settings = [], {}, {}
                for p in group:
                    try:
                        requests.append(prompt_request(p, clip_seed(seed, p["id"], run), max_new_tokens, normalize))
                        settings[p["id"]] = system.request_settings(requests[-1])
                    except (ValueError, TypeError) as exc:
                        errors[p["id"]] = f"request: {_error_text(exc)}"
                ok = [p for p in group if p["id"] not in errors]
                # at each system's own rate: the judges convert each clip once, to their own rates
                results = system.synthesize_many(requests, [p["id"] for p in ok], run=run, native=True) if ok else []
                for p, req, res in zip(ok, requests, results, strict=True):
                    path = out / f"run{run}" / f"{p['id']}.wav"
                    if isinstance(res, Exception):
                        errors[p["id"]] = f"synthesis: {_error_text(res)}"
                        continue
                    write_wav(path, res.samples, res.sample_rate)
                    seed_used = res.seed if res.seed is not None else req.seed
                    records[(run, p["id"])] = _clip_record(p, run, path, seed_used, system, out, None,
                                                           settings[p["id"]], res.info.get("chunk_seconds"))
                    counts["synthesized"] += 1
                for p in group:
                    if p["id"] in errors:
                        records[(run, p["id"])] = _clip_record(
                            p, run, out / f"run{run}" / f"{p['id']}.wav", clip_seed(seed, p["id"], run), system, out,
                            errors[p["id"]], settings.get(p["id"], {}))
                        counts["failed"] += 1
                    log.write(json.dumps(records[(run, p["id"])], ensure_ascii=False) + "\n")
                log.flush()
            bar.update(len(chunk))
    ordered = [records[(run, p["id"])] for run in range(1, runs + 1) for p in prompts]
    write_jsonl(manifest_path, ordered)  # atomic
    return ordered, counts


def transcribe_all(judge: ASRJudge, prompts: list[dict], manifest: list[dict], out: Path) -> list[dict]:
    """ASR for every clip without an error; per-clip ASR errors are recorded, not raised."""
    by_id = {p["id"]: p for p in prompts}
    lines = []
    for rec in tqdm(manifest, desc=f"transcribing ({judge.name})", unit="clip"):
        line = {"id": rec["id"], "run": rec["run"], "hyp": None, "judge": judge.name, "error": rec["error"]}
        if rec["error"] is None:
            try:
                clip = load_native(out / rec["path"], max_seconds=LOCAL_MAX_SECONDS)  # the judge converts it once
                line["hyp"] = judge.transcribe(clip.samples, clip.sample_rate, by_id[rec["id"]]["language"],
                                               clip_id=run_key(rec["id"], rec["run"]))
            except Exception as exc:  # noqa: BLE001 - one clip's ASR failure must not stop the run
                line["error"] = f"asr: {_error_text(exc)}"
        lines.append(line)
    write_jsonl(out / TRANSCRIPTS, lines)
    return lines


def _pool(rows: list[dict]) -> dict:
    scored = [r for r in rows if r["error"] is None]
    out = {"clips": len(rows), "scored": len(scored), "failed": len(rows) - len(scored)}
    for rate, unit in RATE_KEYS + CLUSTER_RATE_KEYS:
        out[rate] = corpus_rate(ErrorCounts(r[f"{unit}_errors"], r[f"{unit}_ref_len"]) for r in scored) \
            if scored else None
    durations = [r["duration"] for r in rows if r["duration"] is not None]  # every clip with audio
    out["mean_duration"] = sum(durations) / len(durations) if durations else None
    # audio judges and the watermark detector: every clip with audio, whatever its ASR said
    return {**out, **acoustic.pool(rows), **watermark.pool(rows)}


def gcer_rules() -> str:
    """Which library and Unicode version stand behind every GCER column (a CSV cell)."""
    return "; ".join(f"{seg} = {segmentation_source(seg)}" for seg in SEGMENTATIONS)


def score_all(prompts: list[dict], manifest: list[dict], transcripts: list[dict],
              segmentation: str = DEFAULT_SEGMENTATION, normalize: bool = True,
              extra: dict[tuple[int, str], dict] | None = None) -> tuple[list[dict], list[dict]]:
    """Per-clip rows (metrics, errors) and corpus-pooled summary rows (overall/language/domain/run).

    `gcer` and `content_error` use `segmentation`; `gcer_<s>` hold the GCER under each one.
    normalize: score the spoken form of the reference and the transcript
    (`evaluation.text.spoken_form`: numbers, money, dates, times as words), the text the
    system was asked to read; `ref_spoken` keeps it per clip. False scores the text as typed.
    extra: more per-clip columns keyed (run, id) (the audio judges, evaluation.acoustic).
    """
    by_id = {p["id"]: p for p in prompts}
    tags = {"gcer_segmentation": segmentation, "gcer_rules": gcer_rules()}
    rows = []
    for rec, tr in zip(manifest, transcripts, strict=True):
        p = by_id[rec["id"]]
        ref = spoken_form(p["text"], p["language"]) if normalize else p["text"]
        row = {"run": rec["run"], "id": rec["id"], "language": p["language"], "domain": p["domain"],
               "duration": rec["duration"], "ref": p["text"], "ref_spoken": ref, "hyp": tr["hyp"], "error": tr["error"],
               **tags}
        if tr["error"] is None:
            hyp = spoken_form(tr["hyp"], p["language"]) if normalize else tr["hyp"]
            row.update(score_pair(ref, hyp, segmentation))
            row["content_error"] = content_error(ref, hyp, p["language"], segmentation=segmentation)
        rows.append({**row, **(extra or {}).get((rec["run"], rec["id"]), {})})
    summary = [{"level": "overall", "group": "all", **_pool(rows), **tags}]
    for level in ("language", "domain", "run"):
        for group in sorted({str(r[level]) for r in rows}):
            summary.append({"level": level, "group": group, **_pool([r for r in rows if str(r[level]) == group]),
                            **tags})
    return rows, summary


def nova_all(prompts: list[dict], manifest: list[dict], transcripts: list[dict], system: str,
             listener: str) -> tuple[list[dict], nova.NovaAggregate | None]:
    """NoVA verdicts for tagged prompts. No usable clip -> empty hypothesis (not rendered);
    an ASR failure -> listener error (no verdict)."""
    by_id = {p["id"]: p for p in prompts if is_nova(p)}
    if not by_id:
        return [], None
    per_run: dict[int, list[dict]] = defaultdict(list)
    for rec, tr in zip(manifest, transcripts, strict=True):
        if rec["id"] not in by_id:
            continue
        if rec["error"] is not None:
            hyp = {"id": rec["id"], "hyp": ""}
        else:
            hyp = {"id": rec["id"], "hyp": tr["hyp"]}
        verdict = nova.score_prompt(by_id[rec["id"]], hyp)
        per_run[rec["run"]].append({"run": rec["run"], **verdict})
    verdicts = [v for r in sorted(per_run) for v in per_run[r]]
    return verdicts, nova.aggregate(system, {listener: [per_run[r] for r in sorted(per_run)]})


def main(argv: list[str] | None = None, system: Synthesizer | None = None) -> int:
    """CLI entry; `system` lets tests inject a Synthesizer instead of --system."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="rumik eval", description=__doc__.split("\n")[0])
    parser.add_argument("--system", required=system is None,
                        help="rumik | rumik:PATH_OR_ID | tiny | espeak | folder:DIR")
    parser.add_argument("--prompts", required=True, help="prompt set (JSONL)")
    parser.add_argument("--runs", type=int, default=1, help="times each prompt is synthesised (default 1)")
    parser.add_argument("--asr", required=True,
                        help="pocketsphinx | hf:MODEL | whisper:SIZE | supplied:PATH | indicconformer[:PATH]")
    parser.add_argument("--out", required=True, help="output folder (rerun with the same folder to resume)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="base seed; per-clip seeds derive from it")
    parser.add_argument("--limit", type=int, default=None, help="only the first K prompts")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="requests per synthesis batch")
    parser.add_argument("--asr-cache", default=None, help=f"transcript cache file (default OUT/{DEFAULT_CACHE}; "
                        "'none' disables)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="cap on generated tokens per clip for rumik systems (100 tokens = 1 s; default 2048)")
    parser.add_argument("--gcer-segmentation", choices=SEGMENTATIONS, default=DEFAULT_SEGMENTATION,
                        help="clusters behind the `gcer` column and the content error: 'grapheme' (the grapheme "
                        "package, Unicode 13.0 rules, comparable with the release's GCER; default) or 'unicode' "
                        "(regex \\X, Unicode 15.1+ rules: a conjunct is one cluster). Both are reported.")
    parser.add_argument("--no-normalize", action="store_true",
                        help="systems read the text as typed and references are scored as typed "
                             "(default: numbers, money, dates, times become words for both)")
    acoustic.add_arguments(parser)  # --quality --speaker --speaker-ref --speaker-encoder
    add_engine_arguments(parser)  # --device (also for HF ASR) --dtype --compile --backend vllm (raise --batch-size)
    add_watermark_argument(parser)  # --watermark library|all|off: whose clips the engine marks
    args = parser.parse_args(argv)
    normalize = not args.no_normalize
    if min(args.runs, args.batch_size, args.limit or 1, args.max_new_tokens or 1) < 1:
        parser.error("--runs, --limit, --batch-size and --max-new-tokens must be at least 1")
    engine_opts = engine_options(parser, args)
    if args.backend == "vllm":
        quiet_vllm_logs()
    out = Path(args.out)
    cache = out / DEFAULT_CACHE if args.asr_cache is None else args.asr_cache
    cache = None if str(cache).lower() == "none" else cache
    try:
        prompts = load_prompts(args.prompts, args.limit)
        system = system or load_system(args.system, **engine_opts)
        if missing_clips(out, prompts, args.runs):
            system.load()  # the model before the judge: both are checked before any synthesis
        judge = load_asr(args.asr, cache=cache, device=args.device)
        judges = acoustic.load_judges(args, system)
        detector = shared_watermarker()  # every clip is scored: a missing detector stops here, with its fix
        manifest, counts = synthesize_all(system, prompts, out, args.runs, args.seed, args.batch_size,
                                          args.max_new_tokens, normalize)
    except RumikError as exc:
        return report_user_error(exc)
    transcripts = transcribe_all(judge, prompts, manifest, out)
    try:  # a voice reference the system cannot speak stops the run with its fix
        extra = acoustic.clip_values(judges, prompts, manifest, out)
    except RumikError as exc:
        return report_user_error(exc)
    for key, scores in watermark.clip_scores(manifest, out, detector).items():
        extra[key] = {**extra.get(key, {}), **scores}
    rows, summary = score_all(prompts, manifest, transcripts, args.gcer_segmentation, normalize, extra)
    verdicts, agg = nova_all(prompts, manifest, transcripts, system.label, judge.name)
    args_line = "python -m evaluation.run " + shlex.join(argv)
    report = write_outputs(out, system, judge, args_line, args.prompts, args.runs, args.seed, counts, rows,
                           summary, verdicts, agg, args.gcer_segmentation, normalize, judges)
    overall = summary[0]
    print(markdown_table(["system", "judge", "clips", "scored", "failed", "WER", "CER",
                          *gcer_headers(args.gcer_segmentation)],
                         [[system.label, judge.name, overall["clips"], overall["scored"], overall["failed"],
                           overall["wer"], overall["cer"], *(overall[rate] for rate, _ in CLUSTER_RATE_KEYS)]]))
    if agg is not None:
        print(f"NoVA score ({judge.name}): {agg.score:.3f}")
    for col in acoustic.COLUMNS:
        if overall.get(col) is not None:
            print(f"{acoustic.HEADERS[col]}: {acoustic.pooled_text(overall, col)}")
    print(f"watermarked (PerthNet detector): {watermark_text(overall)}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
