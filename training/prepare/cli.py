"""Encode a manifest's audio into Mimi-token training shards (docs/training.md, "Preparing a corpus").

`python -m training.prepare` (= `rumik prepare`): the command line of training.prepare, whose
docstring is its help.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rumik_app.cli import module_doc
from rumik_app.errors import user_errors
from training.config import load_config
from training.prepare.config import PrepareConfig
from training.prepare.engines import ENGINES
from training.prepare.pipeline import prepare
from training.prepare.shards import REPORT_FILE

SHOWN_SKIPS = 20


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=module_doc("training.prepare"),  # the package's docstring
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, help="JSONL: audio, text, speaker, language [, description, "
                                                          "tone, accent, pace]; or a folder of audio files")
    parser.add_argument("--speaker", help="with a folder: every file's voice, or '{folder}' for its folder's name")
    parser.add_argument("--language", help="with a folder: the language of every file (e.g. hi)")
    parser.add_argument("--model", required=True, help="checkpoint folder, hub id or 'tiny' (its Mimi encodes)")
    parser.add_argument("--out", required=True, help="DATA_DIR for shards, index.jsonl and report.json")
    parser.add_argument("--config", help="TOML or JSON PrepareConfig (e.g. training/configs/prepare_corpus.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one PrepareConfig key (repeatable), e.g. --set min_dnsmos=3.0")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local: this process; ray: Ray Data (this machine, or --address)")
    parser.add_argument("--address", help="a Ray cluster to join (e.g. ray://head:10001 or auto); default: start "
                                          "Ray here")
    parser.add_argument("--workers", type=int, default=2, help="--engine ray: cleaner actors (one CPU each)")
    parser.add_argument("--encoders", type=int, default=None,
                        help="--engine ray: Mimi actors (default: one per GPU in the cluster, else 1 on CPU)")
    parser.add_argument("--shard-size", type=int, default=None, help="manifest lines per shard (shard_size)")
    parser.add_argument("--batch-size", type=int, default=None, help="clips per Mimi encode call (batch_size)")
    parser.add_argument("--device", default=None, help="--engine local: cuda / cpu (default: cuda if available)")
    parser.add_argument("--new-speakers", nargs="*", default=(),
                        help="voice names not in the checkpoint's config (training adds them to it)")
    parser.add_argument("--min-seconds", type=float, default=None, help="shortest clip (min_seconds)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="longest clip (max_seconds); longer rows are recordings to segment")
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.shard_size is not None and args.shard_size < 1) or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--shard-size and --batch-size must be at least 1")
    if args.workers < 1 or (args.encoders is not None and args.encoders < 1):
        parser.error("--workers and --encoders must be at least 1")
    from training.common import one_process_only  # imports torch: after parsing, so --help stays instant

    with user_errors():  # PrepareError, ConfigError, CheckpointError, ...: one `error: ...` line, exit status 2
        one_process_only("rumik prepare")  # it scales with Ray (--engine ray), not a launcher
        config = load_config(PrepareConfig, args.config, args.overrides)
        report = prepare(args.manifest, args.model, args.out, args.shard_size, args.batch_size, args.device,
                         tuple(args.new_speakers), args.min_seconds, args.max_seconds, config=config,
                         engine=args.engine, address=args.address, workers=args.workers, encoders=args.encoders,
                         speaker=args.speaker, language=args.language)
    print(f"kept {report['kept']} utterances ({report['hours']} h) from {report['manifest_lines']} lines, "
          f"dropped {report['skipped_count']} (see {Path(args.out) / REPORT_FILE})")
    if report["dropped"]:
        print("  dropped: " + ", ".join(f"{key} {count}" for key, count in report["dropped"].items()))
    for item in report["skipped"][:SHOWN_SKIPS]:
        print(f"  line {item['line']}: {item['reason']}")
    return report
