"""Data preparation: a manifest of clips -> Mimi codes in shards, plus an index (docs/ARCHITECTURE.md §6).

    python -m training.prepare --manifest clips.jsonl --model rumik-ai/rumik-oss-1-base --out data/my_voice
    python -m training.prepare --manifest clips.jsonl --model tiny --out /tmp/data --new-speakers Meera

Manifest: one JSON object per line with `audio` (a path; relative paths are relative to the
manifest's folder), `text`, `speaker`, `language` and optionally `description`, `tone`,
`accent`, `pace`. Audio is anything soundfile (or, failing that, ffmpeg) reads, loaded by
`evaluation.audio_io`: mixed to mono, resampled to 24 kHz, zero-padded to whole frames and
encoded with the checkpoint's frozen Mimi in batches.

Output (DATA_DIR):
    shards/shard_00000.npy    int16 [frames, Q] codes of every kept clip of the shard, concatenated
    shards/shard_00000.json   the shard's rows (offset, frames, text, speaker, ...) and skipped rows
    index.jsonl               every kept row (what training reads)
    report.json               counts and the skipped rows with their reasons
    prepare.json              the codec fingerprint and token layout the codes belong to

Shard k holds manifest lines [k * shard_size, (k + 1) * shard_size). A shard's .json is
written last, atomically, so a killed run resumes by re-encoding only unfinished shards
(a finished shard whose manifest lines changed is redone). Bad rows (invalid JSON, missing
field, missing or unreadable audio, empty text, unknown tag or other prompt error, unknown
speaker, audio shorter than 0.2 s or longer than 30 s) are skipped and listed in the report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from evaluation import audio_io
from rumik_app.errors import RumikError, user_errors
from rumik_app.files import atomic_write
from rumik_app.prompt import PromptError, normalize_voice, validate_text
from rumik_app.request import DESCRIPTION_FIELDS, SynthesisRequest
from rumik_app.text.languages import get_language

if TYPE_CHECKING:
    from rumik_app.model.codec import MimiCodec

MAX_SECONDS = 30.0
MIN_SECONDS = 0.2
SHARD_SIZE = 1000
BATCH_SIZE = 16
ENCODE_BUFFER_BATCHES = 4  # clips loaded ahead of encoding, in batches (bounds memory)
REQUIRED_FIELDS = ("audio", "text", "speaker", "language")
SHARDS_DIR = "shards"
INDEX_FILE = "index.jsonl"
REPORT_FILE = "report.json"
PREPARE_FILE = "prepare.json"
CODE_DTYPE = np.int16  # codebook_size 2048 fits; checked against the config


class PrepareError(RumikError, RuntimeError):
    """The whole run cannot proceed (not a bad row); the message names the fix."""


@dataclass
class Clip:
    """One valid manifest row with its audio at 24 kHz mono (samples: float32 [N])."""

    line: int
    meta: dict
    samples: np.ndarray


def codec_fingerprint(checkpoint_dir: Path) -> str:
    """sha256 of the codec weights and config: codes are only valid for the same Mimi."""
    digest = hashlib.sha256()
    for name in ("codec/config.json", "codec/model.safetensors"):
        with open(checkpoint_dir / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: Path, data) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1))


# Clips are read up to this much past the length limit, so a clip slightly too long is reported
# with its length; a much longer one (or a header that lies) stops the decoder there.
READ_MARGIN_S = 1.0


def load_audio(path: Path, sample_rate: int, max_seconds: float) -> tuple[np.ndarray, float]:
    """Read a clip (the evaluation loader: soundfile, then ffmpeg; refused from its header or
    while decoding when longer than `max_seconds`) -> (float32 mono [N] at `sample_rate`, seconds)."""
    samples = audio_io.load_audio(path, sample_rate, max_seconds=max_seconds)
    return np.ascontiguousarray(samples, dtype=np.float32), len(samples) / float(sample_rate)


def check_row(raw: str, line: int, base_dir: Path, speakers: tuple[str, ...], sample_rate: int,
              min_seconds: float, max_seconds: float) -> Clip:
    """Validate one manifest line and load its audio; raises ValueError(reason) for a bad row."""
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise ValueError("line is not a JSON object")
    for key in REQUIRED_FIELDS:
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ValueError(f"missing or empty field {key!r}")
    extras = {k: row[k] for k in DESCRIPTION_FIELDS if row.get(k) not in (None, "")}
    try:
        req = SynthesisRequest(row["text"], voice=row["speaker"], **extras)
        req.prompt(voices=speakers)  # the engine's prompt function: tags, voice, description
    except PromptError as exc:
        hint = " (a new voice? pass --new-speakers NAME)" if "Unknown voice" in str(exc) else ""
        raise ValueError(f"prompt: {exc}{hint}") from exc
    except TypeError as exc:
        raise ValueError(f"bad optional field ({exc})") from exc
    audio = Path(row["audio"]).expanduser()
    audio = audio if audio.is_absolute() else base_dir / audio
    if not audio.is_file():
        raise ValueError(f"audio file not found: {audio}")
    try:
        samples, seconds = load_audio(audio, sample_rate, max_seconds + READ_MARGIN_S)
    except Exception as exc:  # soundfile raises several types for corrupt or unknown files
        raise ValueError(f"unreadable audio ({type(exc).__name__}: {exc})") from exc
    if seconds < min_seconds or seconds > max_seconds:
        raise ValueError(f"audio is {seconds:.2f} s; allowed {min_seconds}-{max_seconds} s")
    try:
        language = get_language(row["language"]).code
    except ValueError:
        language = row["language"].strip()  # a language outside the table: kept as given
    meta = {"audio": row["audio"], "text": validate_text(row["text"]),
            "speaker": normalize_voice(row["speaker"], speakers), "language": language,
            "seconds": round(seconds, 4), **{k: extras.get(k) for k in DESCRIPTION_FIELDS}}
    return Clip(line=line, meta=meta, samples=samples)


def encode_clips(codec: MimiCodec, clips: list[Clip], batch_size: int) -> list[np.ndarray]:
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


def lines_digest(lines: list[str]) -> str:
    return hashlib.sha1("\n".join(lines).encode("utf-8")).hexdigest()


def prepare_shard(shard: int, lines: list[str], first_line: int, shard_dir: Path, base_dir: Path,
                  codec: MimiCodec, speakers: tuple[str, ...], batch_size: int, min_seconds: float,
                  max_seconds: float, progress: tqdm) -> dict:
    """Validate, load and encode one shard's lines; write its .npy and (last) its .json.

    Audio is held for at most ENCODE_BUFFER_BATCHES batches at a time (sorted by length
    there, to pad little); only the small codes are kept for the whole shard.
    """
    buffer: list[Clip] = []
    kept: list[tuple[Clip, np.ndarray]] = []
    skipped = []

    def flush() -> None:
        kept.extend(zip(buffer, encode_clips(codec, buffer, batch_size), strict=True))
        for clip in buffer:
            clip.samples = np.zeros(0, np.float32)
        buffer.clear()

    for k, raw in enumerate(lines):
        line = first_line + k
        progress.update(1)
        if not raw.strip():
            continue
        try:
            buffer.append(check_row(raw, line, base_dir, speakers, codec.sample_rate, min_seconds, max_seconds))
        except ValueError as exc:
            skipped.append({"line": line, "audio": _audio_field(raw), "reason": str(exc)})
        if len(buffer) >= batch_size * ENCODE_BUFFER_BATCHES:
            flush()
    if buffer:
        flush()
    codes = [c for _, c in kept]
    rows, offset = [], 0
    for clip, c in kept:
        rows.append({**clip.meta, "line": clip.line, "offset": offset, "frames": int(c.shape[0])})
        offset += int(c.shape[0])
    name = f"shard_{shard:05d}"
    array = np.concatenate(codes, axis=0) if codes else np.zeros((0, codec.num_quantizers), CODE_DTYPE)
    atomic_write(shard_dir / f"{name}.npy", lambda fh: np.save(fh, array))
    meta = {"shard": shard, "first_line": first_line, "num_lines": len(lines), "lines_sha1": lines_digest(lines),
            "rows": rows, "skipped": skipped}
    write_json_atomic(shard_dir / f"{name}.json", meta)
    return meta


def _audio_field(raw: str) -> str | None:
    try:
        row = json.loads(raw)
        return row.get("audio") if isinstance(row, dict) else None
    except json.JSONDecodeError:
        return None


def prepare(manifest: str | os.PathLike, model: str, out_dir: str | os.PathLike, shard_size: int = SHARD_SIZE,
            batch_size: int = BATCH_SIZE, device: str | None = None, new_speakers: tuple[str, ...] = (),
            min_seconds: float = MIN_SECONDS, max_seconds: float = MAX_SECONDS) -> dict:
    """Encode a manifest into DATA_DIR (resumable); returns the report dict (also report.json)."""
    from rumik_app.checkpoint.load import auto_device, load_codec, resolve_checkpoint
    from rumik_app.model.codec import MimiCodec
    from rumik_app.model.config import RumikOSSConfig

    manifest, out = Path(manifest), Path(out_dir)
    if not manifest.is_file():
        raise PrepareError(f"Manifest {manifest} not found; pass --manifest with a JSONL file.")
    ckpt = resolve_checkpoint(model)
    config = RumikOSSConfig.from_file(ckpt)
    layout = config.layout
    if layout.codebook_size > np.iinfo(CODE_DTYPE).max + 1:
        raise PrepareError(f"codebook_size {layout.codebook_size} does not fit {CODE_DTYPE.__name__} shards.")
    speakers = tuple(config.speakers) + tuple(s for s in new_speakers if s not in config.speakers)
    info = {"codec_sha256": codec_fingerprint(ckpt), "num_quantizers": layout.num_quantizers,
            "codebook_size": layout.codebook_size, "frame_rate_hz": layout.frame_rate_hz,
            "sample_rate": None, "speakers": list(speakers), "manifest": str(manifest.resolve()),
            "shard_size": shard_size}
    codec = MimiCodec(load_codec(ckpt, auto_device(device)), layout.num_quantizers)
    info["sample_rate"] = codec.sample_rate
    previous = out / PREPARE_FILE
    if previous.exists():
        old = json.loads(previous.read_text(encoding="utf-8"))
        for key in ("codec_sha256", "num_quantizers", "shard_size"):
            if old.get(key) != info[key]:
                raise PrepareError(f"{out} was prepared with a different {key} ({old.get(key)} vs {info[key]}); "
                                   f"use a fresh --out, or delete {out} to start over.")
    shard_dir = out / SHARDS_DIR
    shard_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(previous, info)
    lines = manifest.read_text(encoding="utf-8").splitlines()
    metas = []
    with tqdm(total=len(lines), desc="prepare", unit="clip") as progress:
        for shard, lo in enumerate(range(0, len(lines), shard_size)):
            chunk = lines[lo : lo + shard_size]
            done = shard_dir / f"shard_{shard:05d}.json"
            if done.exists() and (shard_dir / f"shard_{shard:05d}.npy").exists():
                meta = json.loads(done.read_text(encoding="utf-8"))
                if meta.get("lines_sha1") == lines_digest(chunk):
                    metas.append(meta)
                    progress.update(len(chunk))
                    continue
            metas.append(prepare_shard(shard, chunk, lo + 1, shard_dir, manifest.parent, codec, speakers,
                                       batch_size, min_seconds, max_seconds, progress))
    return write_index(out, metas, len(lines), layout.frame_rate_hz)


def write_index(out: Path, metas: list[dict], num_lines: int, frame_rate: float) -> dict:
    """index.jsonl (every kept row with its shard) and report.json; returns the report."""
    rows = [{**row, "shard": meta["shard"]} for meta in metas for row in meta["rows"]]
    skipped = [s for meta in metas for s in meta["skipped"]]
    atomic_write(out / INDEX_FILE, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    frames = sum(r["frames"] for r in rows)
    report = {"manifest_lines": num_lines, "kept": len(rows), "skipped_count": len(skipped),
              "hours": round(frames / frame_rate / 3600, 4), "frames": frames,
              "by_language": _count(rows, "language"), "by_speaker": _count(rows, "speaker"), "skipped": skipped}
    write_json_atomic(out / REPORT_FILE, report)
    return report


def _count(rows: list[dict], key: str) -> dict:
    counts: dict = {}
    for row in rows:
        counts[row[key]] = counts.get(row[key], 0) + 1
    return dict(sorted(counts.items()))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, help="JSONL: audio, text, speaker, language [, description, "
                                                          "tone, accent, pace]")
    parser.add_argument("--model", required=True, help="checkpoint folder, hub id or 'tiny' (its Mimi encodes)")
    parser.add_argument("--out", required=True, help="DATA_DIR for shards, index.jsonl and report.json")
    parser.add_argument("--shard-size", type=int, default=SHARD_SIZE, help="manifest lines per shard")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="clips per Mimi encode call")
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda if available)")
    parser.add_argument("--new-speakers", nargs="*", default=(),
                        help="voice names not in the checkpoint's config (training adds them to it)")
    parser.add_argument("--min-seconds", type=float, default=MIN_SECONDS)
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS)
    args = parser.parse_args(argv)
    if args.shard_size < 1 or args.batch_size < 1:
        parser.error("--shard-size and --batch-size must be at least 1")
    with user_errors():  # PrepareError, CheckpointError, ...: one `error: ...` line, exit status 2
        report = prepare(args.manifest, args.model, args.out, args.shard_size, args.batch_size, args.device,
                         tuple(args.new_speakers), args.min_seconds, args.max_seconds)
    print(f"kept {report['kept']} of {report['manifest_lines']} lines ({report['hours']} h), "
          f"skipped {report['skipped_count']} (see {Path(args.out) / REPORT_FILE})")
    for item in report["skipped"][:20]:
        print(f"  line {item['line']}: {item['reason']}")
    return report


if __name__ == "__main__":
    main()
