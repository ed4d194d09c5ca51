"""The encode and write stages, and the index and report made from finished shards.

    encoder = Encoder(model, out_dir, codec_sha256, batch_size=16)   # Mimi, once per process or actor
    meta = encoder.write(clean_shard)            # shards/shard_k.npy, .emb.npy, then (last) .json
    done = is_done(out_dir, task, settings)      # a finished shard of the same lines and settings
    report = write_index(out_dir, tasks, frame_rate, outlier_cosine)   # index.jsonl + report.json

A shard's .json is written last, atomically, so a killed run leaves either a finished shard or
one that is redone. The index and report are streamed from the shards' .json files (a corpus of
millions of rows is never held in memory).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import time
from pathlib import Path

import numpy as np

from rumik_app.files import atomic_write
from training.prepare.clean import STAGES, CleanShard
from training.prepare.rows import Clip, PrepareError, ShardTask

SHARDS_DIR = "shards"
INDEX_FILE = "index.jsonl"
REPORT_FILE = "report.json"
PREPARE_FILE = "prepare.json"
CODE_DTYPE = np.int16  # codebook_size 2048 fits; checked against the config
EMBEDDING_DTYPE = np.float16  # unit vectors: 3 decimals are plenty for cosines, half the disk
MAX_REPORTED = 1000  # skipped rows and speaker suspects listed in report.json (all are counted)


def codec_fingerprint(checkpoint_dir: Path) -> str:
    """sha256 of the codec weights and config: codes are only valid for the same Mimi."""
    digest = hashlib.sha256()
    for name in ("codec/config.json", "codec/model.safetensors"):
        with open(Path(checkpoint_dir) / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: Path, data) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1))


def encode_clips(codec, clips: list[Clip], batch_size: int) -> list[np.ndarray]:
    """Encode clips (longest first, zero-padded to whole frames) -> codes [T, Q] per clip, input order."""
    import torch

    out: list[np.ndarray | None] = [None] * len(clips)
    order = sorted(range(len(clips)), key=lambda i: -len(clips[i].samples))
    size = codec.frame_size
    for lo in range(0, len(order), batch_size):
        part = order[lo : lo + batch_size]
        frames = [math.ceil(len(clips[i].samples) / size) for i in part]
        wave = torch.zeros(len(part), max(frames) * size)
        mask = torch.zeros(len(part), max(frames) * size, dtype=torch.long)
        for row, i in enumerate(part):
            samples = torch.from_numpy(clips[i].samples)
            wave[row, : len(samples)] = samples
            mask[row, : frames[row] * size] = 1
        codes = codec.encode(wave, mask).cpu().numpy()  # [B, Q, T]
        for row, i in enumerate(part):
            out[i] = codes[row, :, : frames[row]].T.astype(CODE_DTYPE)
    return out  # type: ignore[return-value]


class Encoder:
    """encode -> write for clean shards: the checkpoint's frozen Mimi, loaded once (module docstring)."""

    def __init__(self, model: str, out_dir: str | Path, codec_sha256: str, settings: str, batch_size: int,
                 device: str | None = None) -> None:
        from rumik_app.checkpoint.load import auto_device, load_codec, resolve_checkpoint
        from rumik_app.model.codec import MimiCodec
        from rumik_app.model.config import RumikOSSConfig

        checkpoint = resolve_checkpoint(model)
        if codec_fingerprint(checkpoint) != codec_sha256:
            raise PrepareError(f"The codec of {model} here differs from the one the run started with; every "
                               "node must see the same checkpoint (a shared folder, or the same hub revision).")
        layout = RumikOSSConfig.from_file(checkpoint).layout
        self.codec = MimiCodec(load_codec(checkpoint, auto_device(device)), layout.num_quantizers)
        self.shard_dir = Path(out_dir) / SHARDS_DIR
        self.settings, self.batch_size = settings, batch_size

    def __call__(self, row: dict) -> dict:
        meta = self.write(CleanShard.from_row(row))
        return {"shard": meta["shard"], "lines": meta["num_lines"], "kept": len(meta["rows"])}

    def write(self, shard: CleanShard) -> dict:
        """Encode the shard's clips and write its files (.json last); returns the .json's content.
        An older .json goes first, so a run killed here never pairs it with the new codes."""
        Path(f"{self.shard_dir / shard.task.name}.json").unlink(missing_ok=True)
        start = time.perf_counter()
        codes = encode_clips(self.codec, shard.clips, self.batch_size)
        shard.seconds["encode"] += time.perf_counter() - start
        start = time.perf_counter()
        rows, offset = [], 0
        for clip, code in zip(shard.clips, codes, strict=True):
            rows.append({**clip.meta, **clip.scores, "line": clip.line, "offset": offset, "frames": int(code.shape[0])})
            offset += int(code.shape[0])
        task, base = shard.task, self.shard_dir / shard.task.name
        array = np.concatenate(codes, axis=0) if codes else np.zeros((0, self.codec.num_quantizers), CODE_DTYPE)
        atomic_write(f"{base}.npy", lambda fh: np.save(fh, array))
        if shard.embeddings is not None:
            atomic_write(f"{base}.emb.npy", lambda fh: np.save(fh, shard.embeddings.astype(EMBEDDING_DTYPE)))
        shard.seconds["write"] += time.perf_counter() - start
        meta = {"shard": task.shard, "first_line": task.first_line, "num_lines": task.num_lines,
                "lines_sha1": task.lines_sha1, "settings": self.settings, "rows": rows, "skipped": shard.drops,
                "counts": shard.counts, "seconds": {k: round(v, 4) for k, v in shard.seconds.items()},
                "embeddings": shard.embeddings is not None}
        write_json_atomic(Path(f"{base}.json"), meta)
        return meta


def is_done(out_dir: Path, task: ShardTask, settings: str) -> bool:
    """Whether the task's shard is finished, for these lines and settings (resume skips it)."""
    base = Path(out_dir) / SHARDS_DIR / task.name
    try:
        meta = json.loads(Path(f"{base}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    embeddings_ok = not meta.get("embeddings") or Path(f"{base}.emb.npy").exists()
    return (meta.get("lines_sha1") == task.lines_sha1 and meta.get("settings") == settings
            and Path(f"{base}.npy").exists() and embeddings_ok)


def _shard_metas(out_dir: Path, shards: list[int]):
    for shard in shards:
        path = Path(out_dir) / SHARDS_DIR / f"shard_{shard:05d}.json"
        yield json.loads(path.read_text(encoding="utf-8"))


def write_index(out_dir: Path, shards: list[int], num_lines: int, frame_rate: float, outlier_cosine: float,
                run: dict | None = None) -> dict:
    """index.jsonl (every kept row with its shard, in manifest order) and report.json; returns the report.
    Everything but `run` (engine, shards encoded and reused, seconds per stage summed over the
    shards, whichever run made them) is a function of the data and settings alone."""
    out = Path(out_dir)
    totals = {"kept": 0, "frames": 0, "dropped": {}, "language": {}, "speaker": {}, "counts": {},
              "seconds": dict.fromkeys(STAGES, 0.0), "skipped": [], "skipped_count": 0}

    def write_rows(fh) -> None:
        for meta in _shard_metas(out, shards):
            _add_shard(totals, meta)
            for row in meta["rows"]:
                fh.write((json.dumps({**row, "shard": meta["shard"]}, ensure_ascii=False) + "\n").encode("utf-8"))

    atomic_write(out / INDEX_FILE, write_rows)
    report = {"manifest_lines": num_lines, "kept": totals["kept"], "skipped_count": totals["skipped_count"],
              "hours": round(totals["frames"] / frame_rate / 3600, 4), "frames": totals["frames"],
              "dropped": dict(sorted(totals["dropped"].items())), "counts": totals["counts"],
              "by_language": dict(sorted(totals["language"].items())),
              "by_speaker": dict(sorted(totals["speaker"].items())),
              "speakers": speaker_report(out, shards, outlier_cosine), "skipped": totals["skipped"],
              "run": {**(run or {}), "stage_seconds": {k: round(v, 3) for k, v in totals["seconds"].items()}}}
    write_json_atomic(out / REPORT_FILE, report)
    return report


def _add_shard(totals: dict, meta: dict) -> None:
    for row in meta["rows"]:
        totals["kept"] += 1
        totals["frames"] += row["frames"]
        for key in ("language", "speaker"):
            totals[key][row[key]] = totals[key].get(row[key], 0) + 1
    for drop in meta["skipped"]:
        key = drop.get("key", "bad_row")
        totals["dropped"][key] = totals["dropped"].get(key, 0) + 1
        totals["skipped_count"] += 1
        if len(totals["skipped"]) < MAX_REPORTED:
            totals["skipped"].append(drop)
    for key, value in meta.get("counts", {}).items():
        totals["counts"][key] = totals["counts"].get(key, 0) + value
    for key, value in meta.get("seconds", {}).items():
        totals["seconds"][key] = totals["seconds"].get(key, 0.0) + value


def speaker_report(out_dir: Path, shards: list[int], outlier_cosine: float) -> dict | None:
    """Per speaker: clips and the mean cosine to the speaker's mean embedding; the MAX_REPORTED clips
    furthest below `outlier_cosine` as suspects (a mislabelled speaker, or not speech) and how many
    there are. Two streamed passes over the shards. None without embeddings."""
    sums: dict[str, np.ndarray] = {}
    for meta, emb in _embeddings(out_dir, shards):
        for row, vector in zip(meta["rows"], emb, strict=True):
            sums[row["speaker"]] = sums.get(row["speaker"], 0) + vector
    if not sums:
        return None
    centres = {name: total / (np.linalg.norm(total) + 1e-12) for name, total in sums.items()}
    totals = {name: [0.0, 0] for name in centres}
    worst: list[tuple[float, int, dict]] = []  # a heap of the lowest cosines (negated), at most MAX_REPORTED
    count = 0
    for meta, emb in _embeddings(out_dir, shards):
        for row, vector in zip(meta["rows"], emb, strict=True):
            cos = float(vector @ centres[row["speaker"]] / (np.linalg.norm(vector) + 1e-12))
            totals[row["speaker"]][0] += cos
            totals[row["speaker"]][1] += 1
            if cos < outlier_cosine:
                count += 1
                item = {"shard": meta["shard"], "line": row["line"], "audio": row["audio"], "speaker": row["speaker"],
                        "cosine": round(cos, 3)}
                heapq.heappush(worst, (-cos, count, item))
                if len(worst) > MAX_REPORTED:
                    heapq.heappop(worst)
    suspects = [item for _, _, item in sorted(worst, key=lambda entry: -entry[0])]
    return {"mean_cosine": {name: round(total / max(n, 1), 3) for name, (total, n) in sorted(totals.items())},
            "suspects_count": count, "suspects": suspects}


def _embeddings(out_dir: Path, shards: list[int]):
    for meta in _shard_metas(out_dir, shards):
        if meta.get("embeddings") and meta["rows"]:
            path = Path(out_dir) / SHARDS_DIR / f"shard_{meta['shard']:05d}.emb.npy"
            yield meta, np.load(path).astype(np.float32)
