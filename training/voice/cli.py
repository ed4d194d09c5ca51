"""Your own voices: create (LoRA from recordings), list, show, delete, export, import.

`rumik voice` (`python -m training.voice`) makes voice packages and manages a voice library:

    rumik voice create Arjun --audio recordings/arjun --consent consent.wav \\
        --statement "I, Arjun Rao, consent to ..." --out voices [--model PATH|tiny] [--asr whisper:small] \\
        [--transcripts DIR] [--language hi] [--config voice.toml] [--set train.steps=400] [--work runs/voices/Arjun]
    rumik voice create Arjun --audio recordings/arjun --consent-document signed.pdf --statement "..." --out voices
    rumik voice create --smoke --out /tmp/voices       # CPU, ~2 min: espeak-ng male voice, PASS/FAIL
    rumik voice list --voices voices
    rumik voice show Arjun --voices voices
    rumik voice export Arjun Arjun.zip --voices voices
    rumik voice import Arjun.zip --voices voices [--replace]
    rumik voice delete Arjun --voices voices

`create` cuts the recordings into clips, filters them, encodes them with the checkpoint's Mimi,
trains a LoRA adapter of the body and writes VOICES_DIR/NAME (training.voice.create,
training.voice.voice_trainer; docs/voices.md "Adapting a voice"). The others work on the
library folder (rumik_app.voices.library.VoiceLibrary). Parsing imports no torch, so `--help`
is instant; a user error is one `error: ...` line and exit status 2; a smoke FAIL exits 1
(with --set or --model the thresholds may not apply: the verdict is printed, the status stays 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

from rumik_app.errors import user_errors

SMOKE_FAILED = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rumik voice", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    create = commands.add_parser("create", help="train a voice package from a speaker's recordings",
                                 description="Train a LoRA voice package from recordings (docs/voices.md).")
    create.add_argument("name", nargs="?", help="the new voice's name (2-32 letters, digits, _ or -)")
    create.add_argument("--audio", help="a folder of recordings (same-stem .txt transcripts) or a .jsonl manifest")
    consent = create.add_mutually_exclusive_group()
    consent.add_argument("--consent", help="the speaker reading --statement (.wav, .flac, .mp3, .ogg, .m4a): checked "
                                           "to be the recordings' speaker and, with an ASR judge, to say it")
    consent.add_argument("--consent-document", help="instead: a signed consent document (.pdf, .png, .jpg); kept, "
                                                    "and the audio checks are skipped")
    create.add_argument("--statement", help="the consent statement: who consents, to what use, until when")
    create.add_argument("--out", "--voices", dest="out", help="the voice library folder (VOICES_DIR/NAME is written)")
    create.add_argument("--model", help="the checkpoint the voice is for: folder, hub id or 'tiny'")
    create.add_argument("--transcripts", help="a folder of same-stem .txt transcripts (default: beside the audio)")
    create.add_argument("--language", help="language of recordings that do not say (default: from the script)")
    create.add_argument("--asr", help="ASR judge for recordings without transcripts and the CER filter "
                                      "(evaluation.asr specs: pocketsphinx, whisper:small, hf:ID, indicconformer)")
    create.add_argument("--config", help="JSON or TOML VoiceConfig (training/voice/voice_config.py)")
    create.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.steps=400 (repeatable)")
    create.add_argument("--work", help="folder for clips, codes and metrics (default runs/voices/NAME)")
    create.add_argument("--smoke", action="store_true",
                        help="CPU end-to-end check: espeak-ng recordings of a male voice, tiny model, PASS/FAIL")
    for name, text in (("list", "the library's voices (and packages it cannot serve)"),
                       ("show", "one voice's record: consent, data, training config, evaluation"),
                       ("delete", "remove a voice from the library"),
                       ("export", "write a voice as a .zip archive"),
                       ("import", "add a voice from a .zip archive")):
        sub = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name in ("show", "delete", "export"):
            sub.add_argument("name", help="the voice's name (case-insensitive)")
        if name == "export":
            sub.add_argument("archive", help="the .zip to write (or a folder: FOLDER/NAME.zip)")
        if name == "import":
            sub.add_argument("archive", help="a voice archive (.zip)")
            sub.add_argument("--replace", action="store_true", help="overwrite a voice of the same name")
        sub.add_argument("--voices", required=True, help="the voice library folder")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "create" and not args.smoke:
        given = args.consent or args.consent_document
        missing = [flag for flag, value in (("NAME", args.name), ("--audio", args.audio), ("--consent", given),
                                            ("--statement", args.statement), ("--out", args.out)) if not value]
        if missing:
            parser.error(f"create needs {', '.join(missing)} (or --smoke)")
    if args.command == "create" and args.smoke and not args.out:
        parser.error("create --smoke needs --out VOICES_DIR")
    return args


def create_command(args: argparse.Namespace) -> dict:
    from training.common import one_process_only
    from training.config import load_config
    from training.voice.create import create_voice, run_smoke
    from training.voice.voice_config import VoiceConfig

    one_process_only("rumik voice create")
    out = Path(args.out)
    if args.smoke:
        summary = run_smoke(out, Path(args.work) if args.work else None, args.overrides, args.model)
        print_summary(summary)
        changed = bool(args.overrides or args.model)
        print(f"smoke: {summary['verdict']}: {summary['criteria']}" + (
            " (settings changed with --set or --model: the verdict does not set the exit status)" if changed else ""))
        if summary["verdict"] != "PASS" and not changed:
            raise SystemExit(SMOKE_FAILED)
        return summary
    cfg = load_config(VoiceConfig, args.config, args.overrides)
    cfg.model = args.model or cfg.model
    cfg.eval.asr = args.asr or cfg.eval.asr
    cfg.data.language = args.language or cfg.data.language
    work = Path(args.work) if args.work else Path("runs/voices") / args.name
    summary = create_voice(args.name, args.audio, args.consent or args.consent_document, args.statement, out, cfg,
                           work, transcripts=args.transcripts, consent_document=bool(args.consent_document))
    print_summary(summary)
    return summary


def print_summary(summary: dict) -> None:
    figures = summary["evaluation"]
    print(f"voice {summary['voice']}: {summary['package']} ({summary['kept_minutes']:.1f} min of clips, "
          f"{', '.join(summary['languages'])}; {summary['total_seconds']:.0f} s)")
    print(f"  held-out loss {figures['heldout_loss_base']:.3f} -> {figures['heldout_loss_adapted']:.3f} with the "
          f"adapter ({figures['heldout_loss_drop']:.1%} lower); built-in voices {figures['builtin_loss_base']:.3f} -> "
          f"{figures['builtin_loss_adapted']:.3f} ({figures['builtin_drift']:+.1%})")
    if figures.get("speaker_similarity") is not None:
        print(f"  speaker similarity {figures['speaker_similarity']:.3f} (adapter off: "
              f"{figures['speaker_similarity_base']:.3f})" + (f", CER {figures['cer']:.3f}" if figures.get("cer")
                                                              is not None else ""))
    else:
        print(f"  speaker similarity and CER: not measured ({figures.get('synthesis_note')})")
    print(f"  consent: {consent_line(summary['consent'])}")
    print(f"  serve it: --model {summary['checkpoint']} --voices {Path(summary['package']).parent}")


def library_command(args: argparse.Namespace):
    from rumik_app.voices.library import VoiceLibrary, describe

    library = VoiceLibrary(args.voices)
    if args.command == "list":
        packages = library.packages()
        for package in packages:
            drop = package.evaluation.get("heldout_loss_drop")
            print(f"{package.name:<20} {','.join(package.languages) or '-':<10} {package.data_hours:7.2f} h  "
                  f"{package.created_at}" + (f"  held-out loss -{drop:.0%}" if isinstance(drop, (int, float)) else ""))
        for folder, problem in library.problems.items():
            print(f"{folder:<20} not served: {problem}")
        if not packages and not library.problems:
            print(f"no voices in {library.folder} (make one with `rumik voice create`)")
        return [p.name for p in packages]
    if args.command == "show":
        record = describe(library.get(args.name), full=True)
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return record
    if args.command == "delete":
        removed = library.delete(args.name)
        print(f"deleted {library.folder / removed}")
        return removed
    if args.command == "export":
        path = library.export_archive(args.name, args.archive)
        print(f"wrote {path}")
        return path
    package = library.import_archive(Path(args.archive), replace=args.replace)
    print(f"imported {package.name} into {library.folder}")
    return package.name


def main(argv: Sequence[str] | None = None):
    """`rumik voice ARGV`; returns what the command made (a summary, names, a path)."""
    args = parse_args(argv)
    with user_errors(OSError):
        if args.command == "create":
            return create_command(args)
        return library_command(args)


if __name__ == "__main__":
    main()


def consent_line(verification: dict) -> str:
    """One line of what checked the consent (training.voice.consent's record)."""
    if verification.get("method") != "recording":
        return verification.get("note", "not checked")
    speaker, words = verification["speaker"], verification["statement"]
    heard = (f"statement CER {words['cer']:.2f} ({words['judge']}; <= {words['max_cer']:.2f})" if "cer" in words
             else f"statement not checked: {words['skipped']}")
    return (f"the recordings' speaker (similarity {speaker['similarity']:.3f}, {speaker['encoder']}; "
            f">= {speaker['threshold']:.2f}); {heard}")
