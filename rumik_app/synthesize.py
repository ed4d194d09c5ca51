"""Command-line synthesis: text in, 24 kHz mono WAV out.

    python -m rumik_app.synthesize --model rumik-ai/rumik-oss-1 --text "नमस्ते <laugh> दोस्तों!" \
        --voice Ira --tone happy --accent Hindi --pace steady --seed 7 --out hello.wav
    python -m rumik_app.synthesize --model tiny --text "Hello." --stream --out /tmp/noise.wav
    python -m rumik_app.synthesize --model tiny --text "₹2,50,000 on 15/08/2026" --no-normalize --out x.wav
    .venv-vllm/bin/python -m rumik_app.synthesize --backend vllm --model PATH --text "..." --out x.wav

The request is checked before the weights load: the text, tone, accent, pace and description
first, then the model (a hub id that cannot be fetched fails within seconds, naming the
fixes), then the voice against the checkpoint's own voices. Numbers, money, dates and times
are read as words (`rumik_app.text.normalize`; the spoken text is printed when it differs);
`--no-normalize` sends the text as typed. A progress bar (seconds of audio generated out of
the budget, on stderr) runs while it generates, when stderr is a terminal and `--quiet` is
not given. At the end it prints the duration, tokens/s and the real-time factor (seconds of
compute per second of audio; below 1 is faster than real time, as in gpu_speed.py), and
warns when a chunk stopped at the `--max-seconds` cap instead of ending by itself. `--stream` synthesises
through the streaming path and also reports the time to first audio. `--model tiny` has
random weights: its audio is noise (it exercises the pipeline), and its default length is
short (3 s).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from rumik_app.audio import Audio
from rumik_app.cli_args import add_engine_arguments, engine_options, quiet_vllm_logs
from rumik_app.errors import RumikError, report_user_error
from rumik_app.request import (
    DEFAULT_MAX_SECONDS, DEFAULT_MODEL, MAX_SECONDS, TINY_MAX_SECONDS, TINY_MODEL, build_request,
    default_max_seconds, setting_type, tokens_for_seconds, wire_settings,
)

FINISH_AT_CAP = "max_tokens"  # rumik_app.decode.sampling.FINISH_MAX_TOKENS: a chunk cut at its token budget
TINY_NOTE = ("note: --model tiny has random weights, so this audio is noise: it exercises the pipeline only. "
             f"Use --model {DEFAULT_MODEL} (or a checkpoint folder) for speech.")
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s of audio [{elapsed}<{remaining}]"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id, local folder, or 'tiny'")
    p.add_argument("--text", required=True, help="text to speak; inline <laugh> <chuckle> <sigh> allowed")
    p.add_argument("--voice", default="Ira")
    p.add_argument("--tone", help="happy | sad | angry | excited | professional")
    p.add_argument("--accent", help="Hindi | Telugu | Tamil | Kannada | Bengali | Punjabi | Indian English")
    p.add_argument("--pace", help="slow | steady | fast")
    p.add_argument("--description", help="free-form description instead of tone/accent/pace")
    p.add_argument("--language", help="optional language code: speaking-rate estimates (long text) and the "
                   "language numbers are read in (default: per clause from the script)")
    p.add_argument("--no-normalize", action="store_true",
                   help="send the text as typed (default: numbers, money, dates, times become words)")
    p.add_argument("--seed", type=int, help="reproducible sampling; omitted = random (printed)")
    add_sampling_arguments(p)
    p.add_argument("--max-seconds", type=float, default=None,
                   help=f"cap per utterance (per chunk for long text), at most {MAX_SECONDS:g} "
                        f"(default {DEFAULT_MAX_SECONDS:g}; {TINY_MAX_SECONDS:g} for --model tiny)")
    p.add_argument("--stream", action="store_true", help="use the streaming path; report time to first audio")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no summary lines (errors and warnings still print)")
    p.add_argument("--out", required=True, help="output .wav path")
    add_engine_arguments(p)  # --device --dtype --compile --backend and vLLM's flags
    args = p.parse_args(argv)
    args.engine_options = engine_options(p, args)
    return args


# What the command line's flags map onto (`rumik_app.request.build_request`'s fields).
REQUEST_FLAGS = ("text", "voice", "tone", "accent", "pace", "description", "language", "seed", "max_seconds")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per sampling setting a client sets (`--temperature`, `--top-k`, ...), derived from
    their declarations in `rumik_app.request`: type, help and default (None: the request's)."""
    for spec in wire_settings():
        parser.add_argument("--" + spec.name.replace("_", "-"), type=setting_type(spec), default=None,
                            help=f"{spec.metadata['help']}; default {spec.default:g}")


def request_fields(args: argparse.Namespace) -> dict:
    """The flags as `build_request` fields (None: not given)."""
    names = (*REQUEST_FLAGS, *(spec.name for spec in wire_settings()))
    return {"normalize": not args.no_normalize, **{name: getattr(args, name) for name in names}}


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


def run(args: argparse.Namespace) -> Audio:
    from rumik_app.checkpoint.load import resolve_checkpoint
    from rumik_app.engine.loading import load_engine
    from rumik_app.model.config import RumikOSSConfig
    from rumik_app.prompt import validate_text

    # Checked twice: every field now, before fetching or loading a 7 GB model; then the voice
    # against the checkpoint's own (a fine-tuned one may have other voices), with the same seed.
    fields = request_fields(args)
    fields["max_seconds"] = default_max_seconds(args.model) if args.max_seconds is None else args.max_seconds
    fields["seed"] = build_request(fields).seed
    path = resolve_checkpoint(args.model)
    config = RumikOSSConfig.from_file(path)
    layout = config.layout  # the checkpoint's own frames: tokens per second of audio
    req = build_request(fields, voices=config.speakers,
                        tokens_for=lambda seconds: tokens_for_seconds(seconds, layout.frame_rate_hz,
                                                                      layout.num_quantizers))
    if args.backend == "vllm":
        quiet_vllm_logs()
    engine = load_engine(str(path), **args.engine_options)
    spoken = req.spoken_text()
    say = (lambda line: None) if args.quiet else print
    if spoken != validate_text(args.text):
        say(f"reading: {spoken}")
    chunks = len(engine.plan(req))
    desc = "generating" if chunks == 1 or args.stream else f"generating {chunks} chunks side by side"
    start = time.perf_counter()
    with AudioProgress(sys.stderr.isatty() and not args.quiet, desc, engine.layout.tokens_per_second) as bar:
        if args.stream:
            pieces, first, stats = [], None, {}
            for piece in engine.stream(req, stats=stats):
                first = first if first is not None else time.perf_counter() - start
                pieces.append(piece)
                bar(stats["tokens"], stats["max_tokens"])
            elapsed = time.perf_counter() - start
            audio = Audio(np.concatenate(pieces) if pieces else np.zeros(0, np.float32), engine.sample_rate, req.seed)
            audio.info = {"seconds": elapsed, "first_audio_s": first, "tokens": stats["tokens"],
                          "finish_reasons": stats["finish_reasons"]}
        else:
            audio = engine.synthesize(req, progress=bar)
            elapsed = audio.info["seconds"]
    audio.save(args.out)
    tokens = audio.info["tokens"]
    say(f"wrote {args.out}: {audio.duration:.2f} s at {audio.sample_rate} Hz, seed {req.seed}")
    say(f"{tokens} tokens in {elapsed:.2f} s = {tokens / max(elapsed, 1e-9):.1f} tokens/s, "
        f"real-time factor {elapsed / max(audio.duration, 1e-9):.2f} ({audio.duration / max(elapsed, 1e-9):.2f}x "
        "real time)"
        + (f", first audio after {audio.info['first_audio_s']:.2f} s" if args.stream and audio.info.get("first_audio_s") else ""))
    warn_if_capped(audio.info.get("finish_reasons") or [], fields["max_seconds"])
    if args.model == TINY_MODEL:
        say(TINY_NOTE)
    return audio


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
