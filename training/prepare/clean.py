"""The segment, filter and embed stages: one shard's manifest lines -> its clean utterances.

    cleaner = Cleaner(manifest, config, speakers)
    shard = cleaner.clean(task)            # CleanShard: clips at 24 kHz, drops, counts, seconds per stage
    row = cleaner(task_row)                # the same as a Ray Data row (`ray.data.Dataset.map` calls it)

Every engine runs this class on whole shards, so the single-process run and a Ray run make the
same clips (docs/training.md, "Preparing a corpus"). The judges (ASR, DNSMOS, speaker encoder)
load once per Cleaner, on first use, on the CPU.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rumik_app.audio import SAMPLE_RATE
from rumik_app.prompt import PromptError, validate_text
from training.audio.levels import clipped_fraction, level_and_snr
from training.audio.vad import clip_spans, speech_frames
from training.prepare.config import PrepareConfig
from training.prepare.rows import (
    Clip,
    PrepareError,
    RowError,
    ShardTask,
    audio_field,
    decode,
    lines_digest,
    parse_row,
    read_lines,
)

STAGES = ("read", "decode", "segment", "filter", "embed", "encode", "write")
# A shard's kept audio is one object (float32): under Arrow's 2 GiB for one value, and a bound on memory.
MAX_SHARD_AUDIO_BYTES = 3 * 2**29  # 1.5 GiB, about 4.6 hours at 24 kHz


@dataclass
class CleanShard:
    """A shard after cleaning: kept clips (input order), drops, stage counts and seconds, embeddings [n, D]."""

    task: ShardTask
    clips: list[Clip]
    drops: list[dict] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    embeddings: np.ndarray | None = None

    def to_row(self) -> dict:
        """Arrow-friendly (ints, strings, bytes) for a Ray Data block; lossless."""
        state = {"task": self.task.__dict__, "drops": self.drops, "counts": self.counts, "seconds": self.seconds,
                 "clips": [{"line": c.line, "meta": c.meta, "scores": c.scores, "n": len(c.samples)}
                           for c in self.clips],
                 "embedding_dim": 0 if self.embeddings is None else int(self.embeddings.shape[1])}
        audio = b"".join(np.ascontiguousarray(c.samples, np.float32).tobytes() for c in self.clips)
        emb = b"" if self.embeddings is None else np.ascontiguousarray(self.embeddings, np.float32).tobytes()
        return {"shard": self.task.shard, "state": json.dumps(state, ensure_ascii=False), "audio": audio,
                "embeddings": emb}

    @classmethod
    def from_row(cls, row: dict) -> CleanShard:
        state = json.loads(row["state"])
        audio = np.frombuffer(row["audio"], np.float32)
        clips, offset = [], 0
        for item in state["clips"]:
            clips.append(Clip(item["line"], item["meta"], audio[offset : offset + item["n"]].copy(), item["scores"]))
            offset += item["n"]
        dim = state["embedding_dim"]
        emb = np.frombuffer(row["embeddings"], np.float32).reshape(-1, dim).copy() if dim else None
        return cls(ShardTask(**state["task"]), clips, state["drops"], state["counts"], state["seconds"], emb)


class Cleaner:
    """read -> decode -> segment -> filter -> embed for whole shards (module docstring)."""

    def __init__(self, manifest: str | Path, config: PrepareConfig, speakers: tuple[str, ...]) -> None:
        self.manifest, self.config, self.speakers = Path(manifest), config, tuple(speakers)
        self._asr = self._dnsmos = self._encoder = None

    def __call__(self, row: dict) -> dict:
        return self.clean(ShardTask(**json.loads(row["task"]))).to_row()

    def clean(self, task: ShardTask) -> CleanShard:
        shard = CleanShard(task, [], counts={"lines": task.num_lines, "rows": 0, "utterances": 0, "kept": 0},
                           seconds=dict.fromkeys(STAGES, 0.0))
        with self._timed(shard, "read"):
            lines = read_lines(self.manifest, task)
        if lines_digest(lines) != task.lines_sha1:
            raise PrepareError(f"{self.manifest} changed while the run was going (lines {task.first_line}.."
                               f"{task.first_line + task.num_lines - 1}); run the command again.")
        utterances: list[Clip] = []
        held = 0
        for k, raw in enumerate(lines):
            if raw.strip():
                made = self._utterances(shard, task.first_line + k, raw)
                utterances += made
                held += sum(clip.samples.nbytes for clip in made)
                if held > MAX_SHARD_AUDIO_BYTES:
                    raise PrepareError(f"Shard {task.shard} holds over {MAX_SHARD_AUDIO_BYTES / 2**30:.1f} GiB of "
                                       "audio (it is one object in memory and in Ray's store): lower shard_size, "
                                       "e.g. --shard-size 16 for a corpus of long recordings.")
        shard.counts["utterances"] = len(utterances)
        with self._timed(shard, "filter"):
            kept = [clip for clip in utterances if self._passes(shard, clip)]
            kept = self._cer_filter(shard, self._dnsmos_filter(shard, kept))
        with self._timed(shard, "embed"):
            shard.embeddings = self._embed(kept)
        shard.clips, shard.counts["kept"] = kept, len(kept)
        return shard

    @contextmanager
    def _timed(self, shard: CleanShard, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            shard.seconds[stage] += time.perf_counter() - start

    def _drop(self, shard: CleanShard, line: int, audio: str | None, key: str, reason: str) -> None:
        shard.drops.append({"line": line, "audio": audio, "key": key, "reason": reason})

    def _utterances(self, shard: CleanShard, line: int, raw: str) -> list[Clip]:
        """One row read, decoded and (when it is a recording) segmented; its drops recorded."""
        cfg = self.config
        try:
            with self._timed(shard, "read"):
                meta, path = parse_row(raw, self.manifest.parent, self.speakers, text_optional=bool(cfg.asr))
            shard.counts["rows"] += 1
            with self._timed(shard, "decode"):  # without an ASR judge a recording cannot be cut: bound it
                longest = cfg.max_recording_seconds if cfg.asr else cfg.max_seconds
                samples, seconds = decode(path, SAMPLE_RATE, longest, cfg.min_seconds,
                                          "" if cfg.asr else " (longer rows are cut into utterances with asr set)")
            with self._timed(shard, "segment"):
                return self._segment(shard, line, meta, samples, seconds)
        except RowError as exc:
            self._drop(shard, line, audio_field(raw), exc.key, str(exc))
            return []

    def _segment(self, shard: CleanShard, line: int, meta: dict, samples: np.ndarray, seconds: float) -> list[Clip]:
        """A clip as it is; a recording (longer than max_seconds) cut by VAD, each piece transcribed."""
        cfg = self.config
        if seconds <= cfg.max_seconds:
            if meta["text"] is None:  # untranscribed (an ASR judge is set): its text is the judge's
                text = self._text_of(samples, meta, meta["audio"], "")
                meta = {**meta, "text": text, "transcribed": True}
            return [Clip(line, {**meta, "seconds": round(seconds, 4)}, samples)]
        speech = speech_frames(samples, SAMPLE_RATE, cfg)
        spans = clip_spans(samples, speech, SAMPLE_RATE, replace(cfg, clip_min_seconds=0.0)) if speech.any() else []
        if not spans:
            raise RowError("no_speech", f"no speech found in {seconds:.1f} s")
        pieces, heard = [], []
        for k, (lo, hi) in enumerate(spans):
            span = {"segment": k, "source_start": round(lo / SAMPLE_RATE, 3), "source_end": round(hi / SAMPLE_RATE, 3)}
            text = self._transcribe(samples[lo:hi], meta["language"], f"{meta['audio']}#{k}", required=True)
            heard.append(text)  # every span's, short ones too: the recording's CER check reads them all
            if hi - lo < cfg.clip_min_seconds * SAMPLE_RATE:
                reason = f"segment {k} is {(hi - lo) / SAMPLE_RATE:.2f} s"
                self._drop(shard, line, meta["audio"], "short_segment", reason)
                continue
            try:
                text = validate_text(text)
            except PromptError as exc:
                self._drop(shard, line, meta["audio"], "bad_text", f"segment {k}: the ASR judge heard {text[:80]!r}: "
                                                                   f"{exc}")
                continue
            pieces.append(Clip(line, {**meta, "text": text, "seconds": round((hi - lo) / SAMPLE_RATE, 4), **span,
                                      "transcribed": True}, samples[lo:hi].copy()))
        return self._check_recording(shard, line, meta, pieces, " ".join(heard))

    def _text_of(self, samples: np.ndarray, meta: dict, clip_id: str, where: str) -> str:
        """The ASR judge's text of a clip, checked as a prompt's text; RowError needs_asr (the judge
        cannot do the language) or bad_text (nothing heard, or not usable text)."""
        heard = self._transcribe(samples, meta["language"], clip_id, required=True)
        try:
            return validate_text(heard)
        except PromptError as exc:
            raise RowError("bad_text", f"{where}the ASR judge heard {heard[:80]!r}: {exc}") from exc

    def _check_recording(self, shard: CleanShard, line: int, meta: dict, pieces: list[Clip], heard: str) -> list[Clip]:
        """The recording's own transcript against the ASR text of all its spans (max_cer): its pieces
        all kept, or all dropped (`recording_cer`)."""
        if not (self.config.max_cer > 0 and pieces and meta["text"] is not None):
            return pieces
        from evaluation.metrics import cer

        error = cer(meta["text"], heard)
        if error <= self.config.max_cer:
            return pieces
        for piece in pieces:
            self._drop(shard, line, meta["audio"], "recording_cer", f"segment {piece.meta['segment']}: recording "
                                                                    f"CER {error:.2f} > {self.config.max_cer:g}")
        return []

    def _passes(self, shard: CleanShard, clip: Clip) -> bool:
        """The per-clip filters: silent, clipped, low_snr (each off at 0)."""
        cfg = self.config
        level, snr = level_and_snr(clip.samples)
        share = clipped_fraction(clip.samples, cfg.clip_level)
        problem = ("silent", f"speech level {level:.1f} dBFS < {cfg.min_level_db:g}") \
            if cfg.min_level_db and level < cfg.min_level_db \
            else ("clipped", f"{share:.2%} of samples at full scale") \
            if cfg.max_clipped_fraction and share > cfg.max_clipped_fraction \
            else ("low_snr", f"SNR {snr:.1f} dB < {cfg.min_snr_db:g}") if cfg.min_snr_db and snr < cfg.min_snr_db \
            else None
        if cfg.min_snr_db:
            clip.scores["snr_db"] = round(snr, 2)
        if problem:
            self._drop(shard, clip.line, clip.meta["audio"], *problem)
        return problem is None

    def _dnsmos_filter(self, shard: CleanShard, clips: list[Clip]) -> list[Clip]:
        if not (self.config.min_dnsmos > 0 and clips):
            return clips
        if self._dnsmos is None:
            from evaluation.quality import DNSMOS

            self._dnsmos = DNSMOS(device="cpu", threads=1, p808=False, max_windows=1)
        scores = self._dnsmos.score([c.samples for c in clips], SAMPLE_RATE)
        kept = []
        for clip, score in zip(clips, scores, strict=True):
            clip.scores["dnsmos"] = round(float(score.ovrl), 3)
            if score.ovrl >= self.config.min_dnsmos:
                kept.append(clip)
            else:
                self._drop(shard, clip.line, clip.meta["audio"], "low_dnsmos",
                           f"DNSMOS OVRL {score.ovrl:.2f} < {self.config.min_dnsmos:g}")
        return kept

    def _cer_filter(self, shard: CleanShard, clips: list[Clip]) -> list[Clip]:
        """Given transcripts against the ASR judge (max_cer); a language the judge lacks is counted, not dropped."""
        if not self.config.max_cer > 0:
            return clips
        from evaluation.metrics import cer

        kept = []
        for clip in clips:
            if clip.meta.get("transcribed"):
                kept.append(clip)  # its text is the judge's own; the recording was checked whole
                continue
            heard = self._transcribe(clip.samples, clip.meta["language"], clip.meta["audio"], required=False)
            if heard is None:
                shard.counts["cer_unchecked"] = shard.counts.get("cer_unchecked", 0) + 1
                kept.append(clip)
                continue
            error = cer(clip.meta["text"], heard)
            clip.scores["cer"] = round(error, 3)
            if error <= self.config.max_cer:
                kept.append(clip)
            else:
                reason = f"CER {error:.2f} > {self.config.max_cer:g} (heard {heard[:80]!r})"
                self._drop(shard, clip.line, clip.meta["audio"], "high_cer", reason)
        return kept

    def _transcribe(self, samples: np.ndarray, language: str, clip_id: str, required: bool) -> str | None:
        """The ASR judge's text; for a language it cannot do: RowError needs_asr (required) or None."""
        from evaluation.asr_judge import ASRError

        if self._asr is None:
            from evaluation.asr import load_asr

            self._asr = load_asr(self.config.asr, device="cpu")
        try:
            return self._asr.transcribe(samples, SAMPLE_RATE, language, clip_id=clip_id)
        except ASRError as exc:
            if required:
                raise RowError("needs_asr", f"the ASR judge cannot transcribe this recording: {exc}") from exc
            return None

    def _embed(self, clips: list[Clip]) -> np.ndarray | None:
        if not (self.config.speaker_encoder and clips):
            return None
        if self._encoder is None:
            from evaluation.speaker import load_speaker_encoder

            self._encoder = load_speaker_encoder(self.config.speaker_encoder, device="cpu")
        return np.asarray(self._encoder.embed([c.samples for c in clips], SAMPLE_RATE), np.float32)
