"""Long renders that survive an interruption: chunks kept in a folder as they finish (`rumik synthesize --job`).

    audio = render_in_folder(engine, req, Path("chapter.job"))   # equals engine.synthesize(req), sample for sample
    stored_seed(Path("chapter.job"))                             # the seed the folder was started with, or None

Run it again after a crash, Ctrl-C or a reboot, with the same request, and it continues from the
first batch of chunks not yet stored. The folder holds `job.json` (the plan: every chunk's
request, the batch size and the rate; written once, atomically) and, per finished chunk,
`chunk_00003.f32` (raw little-endian float32 at the engine's rate) and then `chunk_00003.json`
(`samples`, `sha256`, `tokens`, `finish_reason`), each written atomically
(`rumik_app.files.atomic_write`); a chunk counts as done only when its record is there and its
samples match the hash.

Batches are the engine's `synth_batch_size` consecutive chunks, exactly as `synthesize_many`
forms them, and a batch is made again whole unless every chunk of it is stored, so every batch
decodes the same rows as an uninterrupted run and the joined result (`engine.joined_audio`:
crossfade, watermark) equals `engine.synthesize(req)` exactly. A folder started for another
request (other text, settings or seed) is refused with one message, never mixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rumik_app.errors import RumikError
from rumik_app.files import atomic_write
from rumik_app.request import SynthesisRequest

PLAN_FILE = "job.json"
PLAN_VERSION = 1
SAMPLE_DTYPE = "<f4"

Progress = Callable[[int, int], None]  # (tokens done, token budget), as BaseEngine.synthesize reports


class JobFolderError(RumikError):
    """The folder holds another render, or cannot be read as one."""


def _plan_record(engine, plan: list[SynthesisRequest]) -> dict:
    chunks = []
    for chunk in plan:
        values = dataclasses.asdict(chunk)
        values.pop("lexicons")  # planned chunks carry spoken text: lexicons are applied already
        chunks.append(values)
    return {"version": PLAN_VERSION, "sample_rate": int(engine.sample_rate), "batch": int(engine.synth_batch_size),
            "chunks": chunks}


def stored_seed(folder: str | Path) -> int | None:
    """The seed `folder`'s render was started with (so a rerun without --seed resumes it), or None."""
    path = Path(folder) / PLAN_FILE
    if not path.is_file():
        return None
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["chunks"][0]["seed"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise JobFolderError(f"{path} is not a render's plan ({exc}); use a new --job folder.") from None


def _check_folder(folder: Path, record: dict) -> None:
    path = folder / PLAN_FILE
    if not path.is_file():
        atomic_write(path, json.dumps(record, ensure_ascii=False, indent=1) + "\n")
        return
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobFolderError(f"{path} cannot be read ({exc}); use a new --job folder.") from None
    if stored != record:
        raise JobFolderError(f"{folder} holds a render of another request (other text, settings, seed, model batch "
                             "size or rate); give the same request to resume it, or use a new --job folder.")


def _stored_chunk(folder: Path, index: int) -> tuple[np.ndarray, dict] | None:
    """Chunk `index`'s samples and record when both are there and agree, else None."""
    try:
        record = json.loads((folder / f"chunk_{index:05d}.json").read_text(encoding="utf-8"))
        data = (folder / f"chunk_{index:05d}.f32").read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None
    return np.frombuffer(data, dtype=SAMPLE_DTYPE).astype(np.float32), record


def _store_chunk(folder: Path, index: int, wave: np.ndarray, tokens: int, reason: str) -> None:
    data = np.ascontiguousarray(wave, dtype=SAMPLE_DTYPE).tobytes()
    atomic_write(folder / f"chunk_{index:05d}.f32", data)  # the samples first, then the record that vouches
    atomic_write(folder / f"chunk_{index:05d}.json",
                 json.dumps({"samples": len(wave), "sha256": hashlib.sha256(data).hexdigest(), "tokens": tokens,
                             "finish_reason": reason}) + "\n")


def render_in_folder(engine, req: SynthesisRequest, folder: str | Path, progress: Progress | None = None,
                     say: Callable[[str], None] | None = None):
    """`engine.synthesize(req)`, kept in `folder` chunk by chunk and resumed from it (see the module
    docstring); returns the `Audio` with the engine's info dict (plus `resumed_chunks`). `req`
    needs a fixed seed (a drawn one is fine: it is stored, see `stored_seed`). say: one line
    when chunks are reused. JobFolderError for a folder of another render."""
    folder = Path(folder)
    start = time.perf_counter()
    plan = engine.plan(req)
    _check_folder(folder, _plan_record(engine, plan))
    size = engine.synth_batch_size
    batches = [list(range(first, min(first + size, len(plan)))) for first in range(0, len(plan), size)]
    budgets = [max(plan[i].max_new_tokens for i in batch) for batch in batches]
    waves: dict[int, np.ndarray] = {}
    records: dict[int, dict] = {}
    reused = 0
    for number, batch in enumerate(batches):
        stored = [_stored_chunk(folder, i) for i in batch]
        done = sum(budgets[:number])
        if all(item is not None for item in stored):
            for i, (wave, record) in zip(batch, stored, strict=True):
                waves[i], records[i] = wave, record
            reused += len(batch)
        else:
            report = None if progress is None else (lambda t, done=done: progress(done + t, sum(budgets)))
            rollouts = engine.generate_batch([plan[i] for i in batch], progress=report)
            made = engine.decode(rollouts.codes, rollouts.num_frames)
            for i, wave, tokens, reason in zip(batch, made, rollouts.lengths.tolist(), rollouts.finish_reasons,
                                               strict=True):
                _store_chunk(folder, i, wave, int(tokens), reason)
                waves[i], records[i] = wave, {"tokens": int(tokens), "finish_reason": reason}
        if progress is not None:
            progress(done + budgets[number], sum(budgets))
    if reused and say is not None:
        say(f"resumed: {reused} of {len(plan)} chunks were already made in {folder}")
    ordered = [records[i] for i in range(len(plan))]
    audio = engine.joined_audio([waves[i] for i in range(len(plan))], plan, sum(r["tokens"] for r in ordered),
                                time.perf_counter() - start, [r["finish_reason"] for r in ordered])
    audio.info["resumed_chunks"] = reused
    return audio
