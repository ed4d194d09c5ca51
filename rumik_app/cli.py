"""`rumik`: the one console command (pyproject's [project.scripts]); each subcommand is a module's CLI.

    rumik --help                                   # the subcommands (imports no torch)
    rumik synthesize --model tiny --text "नमस्ते" --out hello.wav
    rumik serve --model tiny --port 8000           # the speech server (OpenAI and Rumik APIs)
    rumik train sft --config training/configs/finetune_voice.toml --out runs/sft
    rumik campaign status --name pilot --data-dir outputs/app
    rumik watermark detect out/*.wav               # PerthNet watermark: watermarked or clean, and a score
    rumik align clip.wav --text "the words" --language en --out words.json   # word timestamps of any clip

`rumik NAME ARGS...` calls NAME's module `main(ARGS)` unchanged, so its flags, help and exit
status are the module's own, and `python -m MODULE ARGS...` stays the same command. Every
`--help` is light: no subcommand module imports torch before it has parsed its arguments
(tests/test_cli.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

PROG = "rumik"


@dataclass(frozen=True)
class Command:
    """A subcommand: `module.main(argv)` does the work; `summary` is its line in `rumik --help`."""

    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "synthesize": Command("rumik_app.synthesize", "text to a WAV (or --format, --sample-rate) with voice, tone, tags"),
    "serve": Command("rumik_app.serve.__main__", "the speech server: OpenAI /v1/audio/speech and Rumik's API"),
    "app": Command("webapp.main", "the Gradio app: synthesise, blind A/B rating, evaluation"),
    "align": Command("evaluation.align", "word timestamps of any recording and its text (forced alignment)"),
    "eval": Command("evaluation.run", "benchmark a system: WER/CER/GCER, NoVA tags, IndicEmo"),
    "train sft": Command("training.sft.__main__", "supervised fine-tuning or continued pre-training"),
    "train grpo": Command("training.grpo.__main__", "GRPO with per-codebook reward routing"),
    "train dpo": Command("training.dpo.__main__", "phased online DPO"),
    "prepare": Command("training.prepare", "encode a manifest's audio into Mimi-token training shards"),
    "voice": Command("training.voice.cli", "your own voices: create (LoRA from recordings), list, show, delete, "
                                           "export, import"),
    "campaign": Command("webapp.campaign.cli", "annotation campaigns: create, add-rater, serve, status, ..."),
    "tiny": Command("rumik_app.checkpoint.tiny", "write a random checkpoint in the published format"),
    "normalize": Command("rumik_app.text.normalize", "show how text is read: numbers, dates, currency, units"),
    "watermark detect": Command("evaluation.watermark", "say whether audio files carry the PerthNet watermark"),
}


def usage() -> str:
    """`rumik --help`: every subcommand with its summary."""
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [ARGS...]   ({PROG} COMMAND --help for a command's flags)", "",
             "rumik-oss-1: expressive text-to-speech for 22 Indian languages and English.", "", "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def find_command(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(subcommand name, its arguments) for `argv`, or None when it names no subcommand."""
    for words in (2, 1):  # "train sft" before a one-word name
        name = " ".join(argv[:words])
        if len(argv) >= words and name in COMMANDS:
            return name, list(argv[words:])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run `rumik ARGV`; returns the exit status (0 when the subcommand returns a non-int result)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    found = find_command(argv)
    if found is None:
        second = [name.split()[1] for name in COMMANDS if name.startswith(f"{argv[0]} ")]  # train: sft, grpo, dpo
        choices = ", ".join(second[:-1]) + " or " * (len(second) > 1) + second[-1] if second else ""
        hint = f" ({argv[0]} takes {choices})" if second else ""
        print(f"{PROG}: unknown command {' '.join(argv[:2])!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    name, args = found
    module = importlib.import_module(COMMANDS[name].module)
    sys.argv[0] = f"{PROG} {name}"  # argparse's default prog: "usage: rumik synthesize ..."
    result = module.main(args)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
