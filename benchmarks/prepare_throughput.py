"""Corpus preparation throughput: `training.prepare` in one process vs on Ray Data, and Mimi encode speed.

    python benchmarks/prepare_throughput.py                        # 100 espeak-ng rows, published-size Mimi
    python benchmarks/prepare_throughput.py --clips 40 --workers 2 --shard-size 10
    python benchmarks/prepare_throughput.py --checkpoint /path/to/ckpt   # any checkpoint (the tests pass the tiny one)

Writes an espeak-ng corpus (benchmarks/espeak_corpus.py: `--clips` rows in English, Hindi and
Tamil, `--long-recordings` of them English recordings of about `--long-seconds` s, longer than
max_seconds = 20 so the VAD cuts them into utterances) into a temporary folder, then prepares it
twice with training/configs/prepare_corpus.toml, each time into a fresh folder:

  local   engine="local": every stage in this process, shard after shard
  ray     engine="ray": Ray Data on this machine, `--workers` cleaner actors (read .. embed) and
          Mimi encoder actors (encode, write): one per GPU where there are GPUs, else one, or
          `--encoders`

The config's filters all run, with three overrides for an offline machine and espeak-ng speech:
asr=pocketsphinx (the config's IndicConformer is not available offline; pocketsphinx is English
only, and the recordings are English), min_dnsmos=1.5 (espeak-ng scores 2.0-3.0 on DNSMOS: 3.0
would drop nearly everything) and max_cer=0 (pocketsphinx on espeak-ng is poor). `--shard-size`
(default 10, the config says 256) gives Ray more than one shard to spread.

Printed per engine: wall seconds (time.perf_counter around prepare(): model and judge loading
included, and for Ray its start-up, about 5-10 s here, and its actors loading their own judges and
Mimi), manifest lines per wall second, kept utterances and hours of audio; the seconds in each
stage (report["run"]["stage_seconds"]: summed over shards, so worker seconds, not wall time); and
Mimi encode throughput = kept audio seconds / encode-stage seconds (seconds of audio encoded per
second of encoder time). Then the Ray/local speed-up (local wall / Ray wall).

Checkpoint: by default a random-weight one whose codec is Mimi at its published size (SEANet
64 filters, 8 transformer layers of width 512, codebook dim 256: the architecture of kyutai/mimi,
~79M parameters), built once and cached like benchmarks/decode_speed.py's; its language model is
the tiny one (prepare never runs it). The tiny checkpoints of rumik_app/checkpoint/tiny.py, even
decode_speed's "real-width" one (it widens the LM only), carry a shrunk Mimi (hidden 64, 8
filters, 2 layers) whose encode time says nothing about the real codec's. Random weights cost what
trained ones do: the encoder has no data-dependent path.

On a 2-core machine, Ray with 2 cleaner workers and 1 encoder runs 3 busy processes (plus Ray's
own) on 2 cores: it oversubscribes. Stage seconds under Ray therefore include time spent waiting
for a core, and Ray gives each actor one torch/OpenMP thread where the local run's torch uses
every core. The ratio of the two runs on the same machine, not the absolute numbers, is the
measurement. `--json PATH` also writes the results.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "training" / "configs" / "prepare_corpus.toml"
# Offline, espeak-ng speech (module docstring); --set adds to these.
OVERRIDES = ("asr=pocketsphinx", "min_dnsmos=1.5", "max_cer=0")
ENGINES = ("local", "ray")
def build_checkpoint() -> Path:
    """A tiny-LM checkpoint whose codec/ is a random Mimi of the published size (cached; built atomically)."""
    from rumik_app.checkpoint.load import cache_root
    from rumik_app.checkpoint.tiny import build_codec, build_tiny_checkpoint

    path = cache_root() / "bench-prepare-published-mimi"
    if (path / "codec" / "model.safetensors").exists():
        return path
    print(f"building a checkpoint with a published-size Mimi in {path} ...", flush=True)
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    build_tiny_checkpoint(partial)
    build_codec(partial, seed=0, published=True)
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path


def describe_codec(checkpoint: Path) -> str:
    from rumik_app.checkpoint.tiny import PUBLISHED_MIMI

    cfg = json.loads((checkpoint / "codec" / "config.json").read_text(encoding="utf-8"))
    size = "published size" if all(cfg.get(k) == v for k, v in PUBLISHED_MIMI.items()) else "shrunk"
    return (f"Mimi hidden {cfg['hidden_size']}, {cfg['num_filters']} filters, {cfg['num_hidden_layers']} "
            f"transformer layers ({size})")


def run_engine(engine: str, manifest: Path, checkpoint: Path, out: Path, config, workers: int,
               encoders: int | None, device: str | None) -> dict:
    """prepare() into a fresh `out`, timed; the row of the results for this engine."""
    from training.prepare import prepare

    start = time.perf_counter()
    report = prepare(manifest, str(checkpoint), out, config=config, engine=engine, workers=workers,
                     encoders=encoders, device=device)
    wall = time.perf_counter() - start
    frame_rate = json.loads((out / "prepare.json").read_text(encoding="utf-8"))["frame_rate_hz"]
    audio_s = report["frames"] / frame_rate
    stages = dict(report["run"]["stage_seconds"])
    encode_s = stages.get("encode", 0.0)
    return {"wall_s": wall, "manifest_lines": report["manifest_lines"],
            "lines_per_s": report["manifest_lines"] / wall, "kept": report["kept"], "hours": audio_s / 3600,
            "audio_s": audio_s, "stage_seconds": stages, "worker_s": sum(stages.values()),
            "encode_audio_s_per_s": audio_s / encode_s if encode_s > 0 else 0.0,
            "shards": report["run"]["shards"], "dropped": report["dropped"]}


def engine_label(engine: str, workers: int, encoders: int | None) -> str:
    mimi = f"{encoders} Mimi" if encoders else "Mimi"
    cleaners = f"{workers} cleaner{'' if workers == 1 else 's'}"
    return f"ray ({cleaners} + {mimi})" if engine == "ray" else "local (1 process)"


def print_tables(result: dict) -> None:
    from evaluation.report import markdown_table

    runs, workers, encoders = result["engines"], result["workers"], result["encoders"]
    print()
    print(markdown_table(
        ["engine", "wall s", "lines/s", "kept", "audio h", "worker s", "encode s", "Mimi audio s / encode s"],
        [[engine_label(name, workers, encoders), row["wall_s"], row["lines_per_s"], row["kept"], f"{row['hours']:.4f}",
          row["worker_s"], row["stage_seconds"].get("encode", 0.0), row["encode_audio_s_per_s"]]
         for name, row in runs.items()], digits=2))
    stages = list(dict.fromkeys(stage for row in runs.values() for stage in row["stage_seconds"]))
    print()
    print(markdown_table(["stage (worker s)", *(name for name in runs)],
                         [[stage, *(row["stage_seconds"].get(stage, 0.0) for row in runs.values())]
                          for stage in stages] + [["total", *(row["worker_s"] for row in runs.values())]],
                         digits=2))
    print(f"\nRay/local speed-up (local wall / Ray wall): {result['speedup']:.2f}x "
          f"(Ray's start-up is in its wall time)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None,
                        help="use this checkpoint instead of the cached one with a published-size Mimi")
    parser.add_argument("--clips", type=int, default=100, help="manifest rows (default 100)")
    parser.add_argument("--long-recordings", type=int, default=2, help="of them, long English recordings")
    parser.add_argument("--long-seconds", type=float, default=25.0, help="length of each long recording")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="longer rows are segmented")
    parser.add_argument("--shard-size", type=int, default=10, help="manifest lines per shard (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="Ray cleaner actors (default 2)")
    parser.add_argument("--encoders", type=int, default=None,
                        help="Ray Mimi actors (default: the engine's, one per GPU, else 1)")
    parser.add_argument("--device", default=None, help="Mimi device (default: CUDA if available, else CPU)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another PrepareConfig override (repeatable)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    from benchmarks.espeak_corpus import make_corpus
    from rumik_app.checkpoint.load import auto_device
    from training.config import load_config
    from training.prepare import PrepareConfig

    checkpoint = Path(args.checkpoint) if args.checkpoint else build_checkpoint()
    overrides = [*OVERRIDES, f"max_seconds={args.max_seconds}", f"shard_size={args.shard_size}", *args.set]
    config = load_config(PrepareConfig, CONFIG, overrides).validate()
    result = {"checkpoint": str(checkpoint), "codec": describe_codec(checkpoint), "clips": args.clips,
              "long_recordings": args.long_recordings, "long_seconds": args.long_seconds, "workers": args.workers,
              "encoders": args.encoders, "device": str(auto_device(args.device)), "overrides": overrides,
              "engines": {}}
    with tempfile.TemporaryDirectory(prefix="prepare_throughput_") as tmp:
        start = time.perf_counter()
        manifest = make_corpus(Path(tmp) / "corpus", clips=args.clips, long_recordings=args.long_recordings,
                               long_seconds=args.long_seconds)
        result["corpus_s"] = time.perf_counter() - start
        for engine in ENGINES:
            row = run_engine(engine, manifest, checkpoint, Path(tmp) / engine, config, args.workers,
                             args.encoders, args.device)
            result["engines"][engine] = row
            print(f"  {engine}: {row['wall_s']:.1f} s, {row['kept']} kept of {row['manifest_lines']} lines",
                  flush=True)
    result["speedup"] = result["engines"]["local"]["wall_s"] / result["engines"]["ray"]["wall_s"]
    print(f"{args.clips} espeak-ng rows ({args.long_recordings} recordings of ~{args.long_seconds:g} s), corpus made "
          f"in {result['corpus_s']:.1f} s; shard_size {args.shard_size}; Mimi on {result['device']}; "
          f"{result['codec']} ({checkpoint})")
    print_tables(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
