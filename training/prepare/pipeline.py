"""`prepare()`: plan the shards, skip the finished ones, run the rest on an engine, then index.

    report = prepare("clips.jsonl", "tiny", "data/out", config=PrepareConfig(min_dnsmos=2.5), engine="ray")

What each stage does, and the files it writes: training.prepare's docstring.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rumik_app.audio import SAMPLE_RATE
from training.prepare.config import PrepareConfig
from training.prepare.engines import ENGINES, run_local, run_ray
from training.prepare.folder import FOLDER_SPEAKER, folder_manifest
from training.prepare.rows import plan_shards
from training.prepare.shards import (
    CODE_DTYPE,
    PREPARE_FILE,
    SHARDS_DIR,
    PrepareError,
    codec_fingerprint,
    is_done,
    write_index,
    write_json_atomic,
)

FIXED_KEYS = ("codec_sha256", "num_quantizers", "shard_size")  # a folder cannot mix these
FOLDER_MANIFEST = "manifest.jsonl"  # a folder of audio, listed (training.prepare.folder)


def prepare(manifest: str | os.PathLike, model: str, out_dir: str | os.PathLike, shard_size: int | None = None,
            batch_size: int | None = None, device: str | None = None, new_speakers: tuple[str, ...] = (),
            min_seconds: float | None = None, max_seconds: float | None = None, *,
            config: PrepareConfig | None = None, engine: str = "local", address: str | None = None,
            workers: int = 2, encoders: int | None = None, speaker: str | None = None,
            language: str | None = None) -> dict:
    """Prepare a manifest into DATA_DIR (resumable); returns the report (also report.json).
    The keyword arguments shard_size .. max_seconds override the same keys of `config`. A folder
    as `manifest` becomes DATA_DIR/manifest.jsonl first (training.prepare.folder), its rows
    spoken by `speaker` (or "{folder}": each file's folder's name) in `language`."""
    from rumik_app.checkpoint.load import resolve_checkpoint
    from rumik_app.model.config import RumikOSSConfig

    overrides = {"shard_size": shard_size, "batch_size": batch_size, "min_seconds": min_seconds,
                 "max_seconds": max_seconds}
    cfg = replace(config or PrepareConfig(), **{k: v for k, v in overrides.items() if v is not None}).validate()
    if engine not in ENGINES:
        raise PrepareError(f"Unknown engine {engine!r}; use one of {ENGINES}.")
    manifest, out = Path(manifest), Path(out_dir)
    if manifest.is_dir():
        if not (speaker and language):
            raise PrepareError(f"{manifest} is a folder: name its voice and language with --speaker NAME (or "
                               f"--speaker '{FOLDER_SPEAKER}' for each file's folder's name) and --language CODE.")
        manifest = folder_manifest(manifest, out / FOLDER_MANIFEST, speaker, language)
    if not manifest.is_file():
        raise PrepareError(f"Manifest {manifest} not found; pass --manifest with a JSONL file or a folder of audio.")
    checkpoint = resolve_checkpoint(model)
    layout = RumikOSSConfig.from_file(checkpoint).layout
    if layout.codebook_size > np.iinfo(CODE_DTYPE).max + 1:
        raise PrepareError(f"codebook_size {layout.codebook_size} does not fit {CODE_DTYPE.__name__} shards.")
    speakers = tuple(RumikOSSConfig.from_file(checkpoint).speakers)
    speakers += tuple(s for s in new_speakers if s not in speakers)
    info = {"codec_sha256": codec_fingerprint(checkpoint), "num_quantizers": layout.num_quantizers,
            "codebook_size": layout.codebook_size, "frame_rate_hz": layout.frame_rate_hz, "sample_rate": SAMPLE_RATE,
            "speakers": list(speakers), "manifest": str(manifest.resolve()), "shard_size": cfg.shard_size,
            "settings": cfg.digest(speakers), "config": asdict(cfg)}
    _check_folder(out, info)
    (out / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / PREPARE_FILE, info)
    tasks = list(plan_shards(manifest, cfg.shard_size))
    pending = [task for task in tasks if not is_done(out, task, info["settings"])]
    num_lines = sum(task.num_lines for task in tasks)
    cleaner_args = {"manifest": manifest.resolve(), "config": cfg, "speakers": speakers}
    # the model as given: a Ray node resolves (or fetches) it itself; the codec's fingerprint must match
    encoder_args = {"model": str(model), "out_dir": out.resolve(), "codec_sha256": info["codec_sha256"],
                    "settings": info["settings"], "batch_size": cfg.batch_size, "device": device}
    with tqdm(total=num_lines, desc=f"prepare ({engine})", unit="line") as progress:
        progress.update(num_lines - sum(task.num_lines for task in pending))
        if engine == "ray":
            run_ray(pending, cleaner_args, encoder_args, progress, address, workers, encoders)
        else:
            run_local(pending, cleaner_args, encoder_args, progress)
    run = {"engine": engine, "shards": len(tasks), "encoded_shards": len(pending),
             "reused_shards": len(tasks) - len(pending)}
    return write_index(out, [t.shard for t in tasks], num_lines, layout.frame_rate_hz, cfg.speaker_outlier_cosine,
                       run)


def _check_folder(out: Path, info: dict) -> None:
    previous = out / PREPARE_FILE
    if not previous.exists():
        return
    old = json.loads(previous.read_text(encoding="utf-8"))
    for key in FIXED_KEYS:
        if old.get(key) != info[key]:
            raise PrepareError(f"{out} was prepared with a different {key} ({old.get(key)} vs {info[key]}); "
                               f"use a fresh --out, or delete {out} to start over.")
