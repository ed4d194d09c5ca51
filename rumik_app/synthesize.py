"""Command-line synthesis: text in, 24 kHz mono WAV out (or another format and rate).

    python -m rumik_app.synthesize --model rumik-ai/rumik-oss-1 --text "नमस्ते <laugh> दोस्तों!" \
        --voice Ira --tone happy --accent Hindi --pace steady --seed 7 --out hello.wav
    python -m rumik_app.synthesize --model tiny --text "Hello." --stream --out /tmp/noise.wav
    python -m rumik_app.synthesize --model tiny --text "₹2,50,000 on 15/08/2026" --no-normalize --out x.wav
    python -m rumik_app.synthesize --model /models/rumik-oss-1 --voices voices/ --voice Arjun --text "..." --out a.wav
    rumik synthesize --backend vllm --model PATH --text "..." --out x.wav
    rumik synthesize --model PATH --text "$(cat chapter.txt)" --seed 7 --job chapter.job --out chapter.wav  # resumable
    rumik synthesize --model tiny --text "Hello." --format ulaw --out x.ulaw   # raw G.711 mu-law, 8 kHz
    rumik synthesize --model tiny --text "Hello." --sample-rate 16000 --out x16k.wav

The request is checked before the weights load: the text, tone, accent, pace and description
first, then the model (a hub id that cannot be fetched fails within seconds, naming the fixes),
then the voice against the checkpoint's own voices and, with `--voices DIR`, a voice library's
(docs/voices.md). Numbers, money, dates and times are read as words
(`rumik_app.text.normalize`; the spoken text is printed when it differs); `--no-normalize`
sends the text as typed. A progress bar (seconds of audio generated out of the budget, on
stderr) runs while it generates, when stderr is a terminal and `--quiet` is not given. At the
end it prints the duration, tokens/s and the real-time factor (seconds of compute per second of
audio; below 1 is faster than real time, as in gpu_speed.py), and warns when a chunk stopped at
the `--max-seconds` cap instead of ending by itself. `--stream` synthesises through the
streaming path and also reports the time to first audio. `--format` (the speech server's:
wav, pcm, mp3, opus, flac, ulaw, alaw, aac) and `--sample-rate` (8000-48000; default 8000 for
ulaw/alaw, else 24000) write the file as the server would send it (`rumik_app.serve.encoding`).
`--model tiny` has random weights: its audio is noise (it exercises the pipeline), and its default
length is short (3 s).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from rumik_app.audio import Audio
from rumik_app.cli_args import add_engine_arguments, add_voices_argument, engine_options, quiet_vllm_logs
from rumik_app.engine.script import DEFAULT_GAP_SECONDS, Part
from rumik_app.errors import RumikError, report_user_error
from rumik_app.prompt import PromptError
from rumik_app.request import (
    DEFAULT_MODEL,
    MAX_SECONDS,
    TINY_MODEL,
    SynthesisRequest,
    build_request,
    default_max_seconds,
    request_settings,
    resolve_seed,
    tokens_for_seconds,
)
from rumik_app.resample import RATES
from rumik_app.serve.encoding import FORMATS, encode_whole, format_problem, output_rate, rate_problem
from rumik_app.settings import flag_name, setting_type
from rumik_app.text.ssml import is_ssml

FINISH_AT_CAP = "max_tokens"  # rumik_app.decode.sampling.FINISH_MAX_TOKENS: a chunk cut at its token budget
TINY_NOTE = ("note: --model tiny has random weights, so this audio is noise: it exercises the pipeline only. "
             f"Use --model {DEFAULT_MODEL} (or a checkpoint folder) for speech.")
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s of audio [{elapsed}<{remaining}]"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id, local folder, or 'tiny'")
    source = p.add_mutually_exclusive_group(required=True)
    add_request_arguments(p, text_group=source)  # --text, --voice, ..., --max-seconds: rumik_app.request's settings
    source.add_argument("--dialogue", metavar="SCRIPT", help="a dialogue script file: one 'Name: text' or "
                                                             "'Name (sad, slow): text' line per turn, one clip out")
    p.add_argument("--gap", type=float, default=None, metavar="SECONDS",
                   help="silence between dialogue turns (default 0.3)")
    p.add_argument("--spans", metavar="FILE.json",
                   help="also write where each dialogue turn or SSML part sits in the clip (start, end in seconds, "
                        "speaker, text, seed) as JSON")
    p.add_argument("--print-prompt", action="store_true",
                   help="print the exact prompt of every chunk (and dialogue turn or SSML part) and exit; reads only "
                        "the checkpoint's config, no weights")
    p.add_argument("--stream", action="store_true", help="use the streaming path; report time to first audio")
    p.add_argument("--job", metavar="DIR", help="keep the chunks of a long text in DIR as they finish; run the same "
                                                "command again after an interruption to continue where it stopped "
                                                "(the same audio as one uninterrupted run)")
    p.add_argument("--timestamps", metavar="FILE.json",
                   help="also write each typed word's start and end (seconds) as JSON (docs/timestamps.md)")
    p.add_argument("--captions", metavar="FILE.srt|FILE.vtt",
                   help="also write captions, SubRip or WebVTT by the suffix")
    p.add_argument("--aligner", action="append", metavar="NAME[:PATH]",
                   help="word aligner for --timestamps/--captions, repeatable: pocketsphinx (English, the default), "
                        "indicconformer:PATH (22 Indian languages), ctc:PATH (a local CTC model)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no summary lines (errors and warnings still print)")
    p.add_argument("--out", help="output path (required unless --print-prompt)")
    p.add_argument("--format", default="wav", choices=FORMATS,
                   help="file format, as the speech server sends it (ulaw/alaw: raw G.711; default wav)")
    p.add_argument("--sample-rate", type=int, choices=RATES, metavar="HZ",
                   help=f"output rate, one of {', '.join(map(str, RATES))} (default 8000 for ulaw/alaw, else 24000)")
    add_engine_arguments(p)  # --device --dtype --compile --backend and vLLM's flags
    add_voices_argument(p)  # --voices DIR: library voices for --voice
    args = p.parse_args(argv)
    if args.out is None and not args.print_prompt:
        p.error("--out is required (or --print-prompt to see the prompts without synthesising)")
    if problem := format_problem(args.format) or rate_problem(args.format, args.sample_rate):
        p.error(problem.replace("response_format", "--format").replace("sample_rate", "--sample-rate"))
    if args.captions is not None and not args.captions.lower().endswith((".srt", ".vtt")):
        p.error("--captions names a .srt or .vtt file")
    if args.aligner and not (args.timestamps or args.captions):
        p.error("--aligner aligns words for --timestamps or --captions; add one of them")
    args.engine_options = engine_options(p, args)
    return args


def add_request_arguments(parser: argparse.ArgumentParser, text_group) -> None:
    """One flag per request setting the command line takes (`rumik_app.request.request_settings`:
    the declared flag, type and help; `--text` in `text_group`). Every flag defaults to None (not
    given: `build_request` applies the declared default), a switch that is on by default is a
    `--no-` flag, and a setting sent by reference takes files, one flag each."""
    for spec in request_settings():
        name = flag_name(spec)
        if name is None:
            continue
        where = text_group if spec.name == "text" else parser
        help_line = spec.metadata["help"]
        if spec.metadata["by_reference"]:
            where.add_argument(name, dest=spec.name, action="append", metavar="FILE", help=help_line)
        elif setting_type(spec) is bool:
            where.add_argument(name, dest=spec.name, action="store_false" if spec.default else "store_true",
                               help=f"turn off (on by default): {help_line}" if spec.default else help_line)
        else:
            where.add_argument(name, dest=spec.name, type=setting_type(spec), default=None,
                               help=help_line + _default_note(spec.default))


def _default_note(default) -> str:
    """A number's default for its flag's help (a text setting's help says its own)."""
    return f"; default {default:g}" if isinstance(default, (int, float)) else ""


def request_fields(args: argparse.Namespace) -> dict:
    """The flags as `build_request` fields (None: not given); --dialogue's file is the text and
    --lexicon's files are read."""
    from rumik_app.text.lexicon_io import load_lexicon

    fields = {spec.name: getattr(args, spec.name) for spec in request_settings() if flag_name(spec)}
    if args.dialogue is not None:
        fields["text"] = _read_script(args.dialogue)
    fields["lexicons"] = tuple(load_lexicon(path) for path in fields["lexicons"] or ()) or None
    return fields


MAX_SCRIPT_BYTES = 1 << 20  # a dialogue script file (its text is bounded again as turns)


def _read_script(path: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read(MAX_SCRIPT_BYTES + 1)
    if len(data) > MAX_SCRIPT_BYTES:
        raise PromptError(f"--dialogue {path} is larger than {MAX_SCRIPT_BYTES // 1024} KB; split the script.",
                          field="text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PromptError(f"--dialogue {path} is not UTF-8 text; save it as UTF-8.", field="text") from None


class AudioProgress:
    """A tqdm bar on stderr counting generated audio in seconds against the budget. It prints
    nothing unless `enabled`; it is drawn from the first update on (when the budget is known)
    and cleared when the run ends. tqdm throttles the redraws."""

    def __init__(self, enabled: bool, desc: str, tokens_per_second: float):
        self.enabled, self.desc, self.tokens_per_second = enabled, desc, tokens_per_second
        self.bar = None

    def __call__(self, tokens: int, budget: int) -> None:
        """`tokens` of `budget` generated tokens so far."""
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=budget / self.tokens_per_second, desc=self.desc, bar_format=BAR_FORMAT,
                            file=sys.stderr, dynamic_ncols=True, leave=False)
        self.bar.total = budget / self.tokens_per_second
        self.bar.update(tokens / self.tokens_per_second - self.bar.n)

    def __enter__(self) -> "AudioProgress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args: argparse.Namespace) -> Audio | None:
    from rumik_app.checkpoint.load import resolve_checkpoint
    from rumik_app.engine.loading import load_engine
    from rumik_app.engine.script import build_script
    from rumik_app.model.config import RumikOSSConfig
    from rumik_app.voices.library import attach_library, open_library

    # Checked twice: every field now, before fetching or loading a 7 GB model (a script's turns
    # and SSML once the checkpoint's voices are known); then the voice against the checkpoint's
    # own (a fine-tuned one may have other voices), with the same seed.
    fields = request_fields(args)
    aligners = None
    if args.aligner:  # an aligner that cannot load is refused before the model is fetched or loaded
        from rumik_app.align import AlignerSet

        aligners = AlignerSet.load(args.aligner, strict=True)
    if args.job is not None and fields["seed"] is None:  # a rerun resumes with the folder's seed
        from rumik_app.engine.resume import stored_seed

        fields["seed"] = stored_seed(args.job)
    fields["max_seconds"] = default_max_seconds(args.model) if args.max_seconds is None else args.max_seconds
    scripted = args.dialogue is not None or is_ssml(fields["text"])
    fields["seed"] = resolve_seed(fields["seed"]) if scripted else build_request(fields).seed
    path = resolve_checkpoint(args.model)
    config = RumikOSSConfig.from_file(path)
    layout = config.layout  # the checkpoint's own frames: tokens per second of audio
    library = open_library(args.voices, path, config.speakers) if args.voices else None
    voices = config.speakers + (library.names() if library is not None else ())
    build = {"voices": voices,
             "tokens_for": lambda seconds: tokens_for_seconds(seconds, layout.frame_rate_hz, layout.num_quantizers)}
    gap = DEFAULT_GAP_SECONDS if args.gap is None else args.gap
    script = build_script(fields, dialogue=args.dialogue is not None, gap_s=gap, **build) if scripted else None
    req = None if script else build_request(fields, **build)
    if args.print_prompt:
        print_prompts(script or [Part(req)], config, voices)
        return None
    if args.job is not None and (script or args.stream):
        raise PromptError("--job renders plain text chunk by chunk; drop --stream, and speak a dialogue or SSML "
                          "document without --job.", field="text")
    if script and args.stream:
        raise PromptError("--stream speaks one request; a dialogue or SSML document is synthesised whole (drop "
                          "--stream).", field="text")
    if script and (args.timestamps or args.captions):
        raise PromptError("word timestamps are not available for a dialogue or SSML document yet; use --spans for "
                          "each part's place, or speak plain text.", field="text")
    if args.backend == "vllm":
        quiet_vllm_logs()
    engine = load_engine(str(path), **args.engine_options)
    if aligners is not None:
        engine.use_aligners(aligners)
    if library is not None:
        attach_library(engine, library, args.max_adapters, args.adapter_rank)
    say = (lambda line: None) if args.quiet else print
    audio = synthesize_script_cli(engine, script, say) if script else synthesize_one(engine, req, args, say)
    save(audio, args)
    if args.spans:
        write_spans(args.spans, audio, req)
    if args.timestamps or args.captions:
        write_timings(engine, req, audio, args, say)
    report(audio, args, say)
    warn_if_capped(audio.info.get("finish_reasons") or [], fields["max_seconds"])
    if args.model == TINY_MODEL:
        say(TINY_NOTE)
    return audio


def save(audio: Audio, args: argparse.Namespace) -> None:
    """--out in --format at --sample-rate: the model's WAV as before, else the server's encoder's file."""
    rate = output_rate(args.format, audio.sample_rate, args.sample_rate)
    if args.format == "wav" and rate == audio.sample_rate:
        audio.save(args.out)
        return
    from rumik_app.files import atomic_write

    atomic_write(args.out, encode_whole(args.format, audio.samples, audio.sample_rate, rate))


def write_spans(path: str, audio: Audio, req: SynthesisRequest | None) -> None:
    """--spans: each part's place in the clip (a plain request: one span, the whole clip), as JSON."""
    import json

    from rumik_app.files import atomic_write

    spans = audio.info.get("parts") or [{"index": 0, "speaker": None, "voice": req.voice, "text": req.text,
                                         "start": 0.0, "end": audio.duration, "pause_after": 0.0, "seed": req.seed}]
    keys = ("index", "speaker", "voice", "text", "start", "end", "pause_after", "seed")
    atomic_write(path, json.dumps([{key: span.get(key) for key in keys} for span in spans], ensure_ascii=False,
                                  indent=1) + "\n")


def write_timings(engine, req: SynthesisRequest, audio: Audio, args: argparse.Namespace, say) -> None:
    """--timestamps and --captions: the words aligned chunk by chunk (the audio is already saved)."""
    from rumik_app.align.captions import write_captions, write_timestamps
    from rumik_app.align.timeline import time_words

    plan = engine.plan(req)
    timings = time_words(req, [chunk.text for chunk in plan], audio.samples, audio.sample_rate,
                         audio.info["chunk_seconds"], engine.aligners)
    if args.timestamps:
        write_timestamps(args.timestamps, timings)
    if args.captions:
        write_captions(args.captions, timings.words)
    say(f"timestamps: {len(timings.words)} words ({timings.aligner or 'no aligner'})")
    if timings.missing:
        print(f"warning: {timings.missing}", file=sys.stderr)


def print_prompts(parts, config, voices=None) -> None:
    """Each part's chunks' exact prompts (BOS as [BOS]), with a header line per part when there are
    several; voices: the checkpoint's and a library's (default: the checkpoint's)."""
    from rumik_app.engine.planning import plan_request

    for index, part in enumerate(parts):
        if part.request is None:
            print(f"# part {index + 1}: {part.pause_after_s:g} s of silence")
            continue
        if len(parts) > 1:
            who = f" ({part.speaker})" if part.speaker else ""
            print(f"# part {index + 1}{who}, seed {part.request.seed}, then {part.pause_after_s:g} s of silence")
        for chunk in plan_request(part.request, config.layout):
            print("[BOS]" + chunk.prompt(voices=voices or config.speakers))


def synthesize_script_cli(engine, parts, say) -> Audio:
    """A dialogue or SSML script through `synthesize_script`, one line per part."""
    from rumik_app.engine.script import synthesize_script

    with AudioProgress(sys.stderr.isatty(), f"generating {len(parts)} parts side by side",
                       engine.layout.tokens_per_second) as bar:
        result = synthesize_script(engine, parts, progress=bar)
    for span in result.spans:
        if span["text"]:
            say(f"  {span['start']:7.2f}-{span['end']:7.2f} s  {span['speaker'] or ''}: {span['text'][:60]}"
                f"  (seed {span['seed']})")
    audio = result.audio()
    audio.info["finish_reasons"] = [reason for span in result.spans for reason in span["finish_reasons"]]
    return audio


def synthesize_one(engine, req: SynthesisRequest, args: argparse.Namespace, say) -> Audio:
    """One request: the whole clip, or through the streaming path (--stream: time to first audio)."""
    from rumik_app.engine.stream import chunk_seconds
    from rumik_app.prompt import validate_text

    spoken = req.spoken_text()
    if spoken != validate_text(args.text):
        say(f"reading: {spoken}")
    chunks = len(engine.plan(req))
    desc = "generating" if chunks == 1 or args.stream else f"generating {chunks} chunks side by side"
    start = time.perf_counter()
    with AudioProgress(sys.stderr.isatty() and not args.quiet, desc, engine.layout.tokens_per_second) as bar:
        if args.job is not None:
            from rumik_app.engine.resume import render_in_folder

            return render_in_folder(engine, req, args.job, progress=bar, say=say)
        if not args.stream:
            return engine.synthesize(req, progress=bar)
        pieces, first, stats = [], None, {}
        for piece in engine.stream(req, stats=stats):
            first = first if first is not None else time.perf_counter() - start
            pieces.append(piece)
            bar(stats["tokens"], stats["max_tokens"])
        audio = Audio(np.concatenate(pieces) if pieces else np.zeros(0, np.float32), engine.sample_rate, req.seed)
        audio.info = {"seconds": time.perf_counter() - start, "first_audio_s": first, "tokens": stats["tokens"],
                      "finish_reasons": stats["finish_reasons"],
                      "chunk_seconds": chunk_seconds(stats["chunk_samples"], engine.sample_rate)}
        return audio


def report(audio: Audio, args: argparse.Namespace, say) -> None:
    """The summary lines: the file, the seed, tokens/s and the real-time factor."""
    tokens, elapsed = audio.info["tokens"], audio.info["seconds"]
    rate = output_rate(args.format, audio.sample_rate, args.sample_rate)
    say(f"wrote {args.out}: {audio.duration:.2f} s at {rate} Hz ({args.format}), seed {audio.seed}")
    first = audio.info.get("first_audio_s") if args.stream else None
    say(f"{tokens} tokens in {elapsed:.2f} s = {tokens / max(elapsed, 1e-9):.1f} tokens/s, "
        f"real-time factor {elapsed / max(audio.duration, 1e-9):.2f} ({audio.duration / max(elapsed, 1e-9):.2f}x "
        "real time)" + (f", first audio after {first:.2f} s" if first else ""))


def warn_if_capped(finish_reasons: list[str], max_seconds: float) -> None:
    """One `warning:` line on stderr when a chunk stopped at the length cap, not by itself."""
    capped = finish_reasons.count(FINISH_AT_CAP)
    if capped:
        where = "" if len(finish_reasons) == 1 else f" in {capped} of {len(finish_reasons)} chunks"
        print(f"warning: generation stopped at the length cap (--max-seconds {max_seconds:g}){where} instead of "
              f"ending by itself, so the speech may be cut off; raise --max-seconds (at most {MAX_SECONDS:g}).",
              file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("rumik_app").setLevel(logging.INFO)  # e.g. "decode step compiled ... in 41.2 s"
    try:
        run(args)
    except (RumikError, OSError) as exc:  # a bad model, text or --out path: one line, exit 2
        return report_user_error(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
