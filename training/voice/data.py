"""A speaker's recordings -> filtered 2-20 s clips with transcripts, ready for `training.prepare`.

    recordings = find_recordings("recordings/arjun")             # a folder, or a .jsonl manifest
    made = collect_clips(recordings, cfg.data, work, "Arjun", asr=None)
    made.train_manifest, made.heldout_manifest, made.report      # prepare's manifests + what was dropped

Input: a folder of audio files (wav, flac, ogg, mp3, m4a, ...; sub-folders included), each with
an optional same-stem .txt transcript, or a manifest in `training.prepare`'s format (one JSON
object per line: `audio`, relative to the manifest's folder, and optionally `text` and
`language`; `speaker` is ignored: every clip is the new voice's). A recording without a
transcript needs an ASR judge (`--asr`), which then transcribes each of its clips.

Bounded: the recordings' headers are read first (nothing decoded) and the total may not pass
`data.max_hours`, nor one file `data.max_recording_minutes` (decoding stops there too,
`evaluation.audio_io.load_audio`). Every recording is mixed to mono and resampled to 24 kHz.

Clips (`training.audio.vad`): a recording with a transcript becomes one clip, its speech from
first to last (so it must be at most `clip_max_seconds` of speech); one without is cut at its
pauses into clips of 2-20 s. Filters, each with its threshold in `[data]` and its count in the
report: duration, clipping (the share of samples at or above `clip_level`), DNSMOS OVRL
(`evaluation.quality`), and with an ASR judge the CER of the given transcript against the
judge's. At least `min_minutes` of clips must survive. A stable ~`heldout_fraction` of them
(by a hash of source and position) is held out for evaluation.

Output in WORK: clips/*.wav (24 kHz), train.jsonl and heldout.jsonl (prepare's manifests,
speaker = the new voice) and data_report.json.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from evaluation.audio_io import AudioLoadError, load_audio, read_header
from rumik_app.audio import SAMPLE_RATE, write_wav
from rumik_app.errors import PromptError
from rumik_app.files import atomic_write
from rumik_app.prompt import validate_text
from rumik_app.text.languages import LANGUAGES, dominant_script, get_language
from training.audio.levels import clipped_fraction
from training.audio.vad import clip_spans, speech_frames
from training.prepare.folder import AUDIO_SUFFIXES, read_transcript
from training.sft.data import DataError

MAX_RECORDINGS = 100_000
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_LISTED_DROPS = 50
SCRIPT_LANGUAGE = {"Devanagari": "hi", "Bengali": "bn", "Arabic": "ur", "Latin": "en"}
REPORT_FILE = "data_report.json"
DROP_REASONS = ("unreadable", "no_speech", "too_short", "too_long", "clipped", "bad_text", "high_cer", "low_dnsmos")


@dataclass(frozen=True)
class Recording:
    """One input file: its path, its transcript (None: the ASR judge transcribes it) and language."""

    path: Path
    text: str | None = None
    language: str | None = None


@dataclass
class Clip:
    """A cut of a recording: float32 samples [N] at 24 kHz, its transcript and where it came from."""

    samples: np.ndarray
    text: str
    language: str | None
    source: str
    start: float
    transcribed: bool = False  # the text is the ASR judge's

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    @property
    def key(self) -> str:
        return f"{self.source}@{self.start:.2f}"


@dataclass
class MadeData:
    """What `collect_clips` wrote: prepare's manifests, the kept clips' languages and the report."""

    train_manifest: Path
    heldout_manifest: Path
    languages: tuple[str, ...]
    report: dict = field(default_factory=dict)


def guess_language(text: str | None, language: str | None = None) -> str | None:
    """An ISO code: `language` (code or name) if given, else the transcript's script's main language."""
    if language:
        return get_language(language).code
    if not text:
        return None
    script = dominant_script(text)
    return SCRIPT_LANGUAGE.get(script) or next((lang.code for lang in LANGUAGES if lang.script == script), None)


def find_recordings(source: str | Path, language: str | None = None,
                    transcripts: str | Path | None = None) -> list[Recording]:
    """The recordings of a folder (with same-stem .txt transcripts beside them, or at the same
    relative path under `transcripts`) or of a .jsonl manifest."""
    source = Path(source)
    if transcripts is not None and not Path(transcripts).is_dir():
        raise DataError(f"--transcripts {transcripts} is not a folder of .txt transcripts.")
    if source.is_file() and source.suffix.lower() == ".jsonl":
        return read_manifest(source, language)
    if not source.is_dir():
        raise DataError(f"--audio {source} is neither a folder of recordings nor a .jsonl manifest.")
    files = sorted(p for p in source.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
    if not files:
        raise DataError(f"{source} holds no audio files ({', '.join(AUDIO_SUFFIXES)}).")
    if len(files) > MAX_RECORDINGS:
        raise DataError(f"{source} holds {len(files):,} audio files; at most {MAX_RECORDINGS:,} are read.")
    text_root = Path(transcripts) if transcripts is not None else source
    return [Recording(p, read_transcript(text_root / p.relative_to(source).with_suffix(".txt"), DataError), language)
            for p in files]


def read_manifest(path: Path, language: str | None = None) -> list[Recording]:
    """training.prepare's manifest: `audio` (relative to the manifest), optional `text`, `language`."""
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise DataError(f"{path} is over {MAX_MANIFEST_BYTES // 2**20} MB; split it.")
    recordings = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            audio = Path(row["audio"]).expanduser()
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"{path}:{number} is not a manifest row with an `audio` path ({exc}).") from None
        text = row.get("text") if isinstance(row.get("text"), str) and row["text"].strip() else None
        recordings.append(Recording(audio if audio.is_absolute() else path.parent / audio, text,
                                    row.get("language") or language))
    if not recordings:
        raise DataError(f"{path} has no rows.")
    return recordings[:MAX_RECORDINGS]


def check_budget(recordings: list[Recording], data) -> float:
    """Seconds the headers declare in all (files whose header says nothing count 0 here and
    are bounded while decoding); DataError past `data.max_hours` or a file past its limit."""
    total = 0.0
    for rec in recordings:
        try:
            header = read_header(rec.path, max_seconds=data.max_recording_minutes * 60)
        except AudioLoadError as exc:
            raise DataError(f"{exc} (one recording may be at most data.max_recording_minutes = "
                            f"{data.max_recording_minutes:g} min; cut it, or raise the bound with --set)") from None
        total += (header.seconds or 0.0) if header is not None else 0.0
        if total > data.max_hours * 3600:
            raise DataError(f"The recordings hold more than data.max_hours = {data.max_hours:g} h of audio; pass "
                            "fewer, or raise the bound with --set data.max_hours=...")
    return total


def cut_recording(rec: Recording, samples: np.ndarray, data) -> tuple[list[tuple[int, int]], str | None]:
    """(spans, drop reason or None) of one recording at 24 kHz (the module docstring's rules)."""
    speech = speech_frames(samples, SAMPLE_RATE, data, vad_key="data.vad")
    if not speech.any():
        return [], "no_speech"
    if rec.text is None:  # every piece, the short ones too: ClipMaker.checked counts what it drops
        return clip_spans(samples, speech, SAMPLE_RATE, replace(data, clip_min_seconds=0.0)), None
    whole = clip_spans(samples, speech, SAMPLE_RATE, _one_clip(data))
    if not whole:
        return [], "too_short"
    start, end = whole[0][0], whole[-1][1]
    if end - start > data.clip_max_seconds * SAMPLE_RATE:
        return [], "too_long"
    return [(start, end)], None


def _one_clip(data):
    """`data` with no limit on a clip's length or pauses: a transcribed recording is one clip."""
    return replace(data, max_pause_seconds=1e9, clip_max_seconds=1e9)


class ClipMaker:
    """Recordings -> clips, counting what each filter drops (the report)."""

    def __init__(self, data, asr=None):
        self.data, self.asr = data, asr
        self.drops = {reason: 0 for reason in DROP_REASONS}
        self.dropped: list[dict] = []
        self.seconds_read = 0.0

    def drop(self, reason: str, source: str, detail: str = "") -> None:
        self.drops[reason] += 1
        if len(self.dropped) < MAX_LISTED_DROPS:
            self.dropped.append({"source": source, "reason": reason, **({"detail": detail} if detail else {})})

    def clips_of(self, rec: Recording, root: Path) -> list[Clip]:
        """The kept clips of one recording (before DNSMOS, which runs over all clips at once)."""
        data, source = self.data, _relative(rec.path, root)
        try:
            samples = load_audio(rec.path, SAMPLE_RATE, max_seconds=data.max_recording_minutes * 60)
        except AudioLoadError as exc:
            self.drop("unreadable", source, str(exc)[:200])
            return []
        self.seconds_read += len(samples) / SAMPLE_RATE
        if self.seconds_read > data.max_hours * 3600:
            raise DataError(f"The recordings hold more than data.max_hours = {data.max_hours:g} h of audio; pass "
                            "fewer, or raise the bound with --set data.max_hours=...")
        spans, reason = cut_recording(rec, samples, data)
        if reason:
            self.drop(reason, source)
        clips = []
        for lo, hi in spans:
            clip = self.checked(rec, samples[lo:hi].copy(), source, lo / SAMPLE_RATE)
            if clip is not None:
                clips.append(clip)
        return clips

    def checked(self, rec: Recording, samples: np.ndarray, source: str, start: float) -> Clip | None:
        """The clip if it passes the duration, clipping, text and CER filters, else None (counted)."""
        data, seconds = self.data, len(samples) / SAMPLE_RATE
        share = clipped_fraction(samples, data.clip_level)
        language = guess_language(rec.text, rec.language)
        problem = ("too_short", f"{seconds:.1f} s") if seconds < data.clip_min_seconds else \
            ("too_long", f"{seconds:.1f} s") if seconds > data.clip_max_seconds else \
            ("clipped", f"{share:.2%} of samples at full scale") if share > data.max_clipped_fraction else None
        if problem is None:
            heard = self.asr.transcribe(samples, SAMPLE_RATE, language) if self.asr is not None else None
            text = rec.text if rec.text is not None else heard
            try:
                text = validate_text(text or "")
            except PromptError as exc:
                problem = ("bad_text", str(exc)[:200])
            if problem is None and rec.text is not None and heard is not None:
                from evaluation.metrics import cer

                error = cer(rec.text, heard)
                problem = ("high_cer", f"CER {error:.2f}") if error > data.max_cer else None
        if problem is not None:
            self.drop(problem[0], source, problem[1])
            return None
        return Clip(samples, text, language or guess_language(text), source, round(start, 2), rec.text is None)

    def dnsmos_filter(self, clips: list[Clip]) -> tuple[list[Clip], list[float]]:
        """The clips whose DNSMOS OVRL reaches `min_dnsmos` (all of them when it is 0) and the scores."""
        if not clips or self.data.min_dnsmos <= 0:
            return clips, []
        from evaluation.quality import DNSMOS

        judge = DNSMOS(device="cpu", p808=False, max_windows=1)
        scores = [s.ovrl for s in judge.score([c.samples for c in clips], SAMPLE_RATE, progress=True)]
        kept = []
        for clip, score in zip(clips, scores, strict=True):
            if score >= self.data.min_dnsmos:
                kept.append(clip)
            else:
                self.drop("low_dnsmos", clip.key, f"OVRL {score:.2f}")
        return kept, scores


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def stable_share(key: str) -> float:
    """A number in [0, 1) fixed by `key` (the held-out split is the same in every run)."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) / 2**32


def split_heldout(clips: list[Clip], fraction: float) -> tuple[list[Clip], list[Clip]]:
    """(train, held out): the round(fraction x n) clips (at least one) with the lowest stable share."""
    order = sorted(range(len(clips)), key=lambda i: stable_share(clips[i].key))
    held = set(order[: max(1, round(fraction * len(clips)))])
    return [c for i, c in enumerate(clips) if i not in held], [c for i, c in enumerate(clips) if i in held]


def write_manifest(path: Path, clips: list[Clip], work: Path, name: str) -> Path:
    """Each clip as clips/<hash of its key>.wav and one prepare manifest row (speaker = the new voice)."""
    rows = []
    for clip in clips:
        wav = Path("clips") / (hashlib.sha256(clip.key.encode("utf-8")).hexdigest()[:16] + ".wav")
        write_wav(work / wav, clip.samples)
        rows.append({"audio": str(wav), "text": clip.text, "speaker": name,
                     "language": clip.language or "en", "source": clip.source, "start": clip.start})
    return atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def collect_clips(recordings: list[Recording], data, work: Path, name: str, asr=None,
                  root: Path | None = None) -> MadeData:
    """Cut, filter, split and write the clips (module docstring); DataError when fewer than
    `data.min_minutes` survive or a recording needs a transcript that nothing can give."""
    missing = [r for r in recordings if r.text is None]
    if missing and asr is None:
        raise DataError(f"{len(missing)} recording(s) have no transcript (e.g. {missing[0].path.name}): put a "
                        "same-stem .txt next to each, give `text` in the manifest, or let an ASR judge transcribe "
                        "them with --asr (e.g. --asr whisper:small).")
    declared = check_budget(recordings, data)
    root = root or Path(".")
    maker, clips = ClipMaker(data, asr), []
    for rec in tqdm(recordings, desc="cutting recordings", unit="file"):
        clips += maker.clips_of(rec, root)
    clips, dnsmos = maker.dnsmos_filter(clips)
    minutes = sum(c.seconds for c in clips) / 60
    report = {"recordings": len(recordings), "declared_hours": round(declared / 3600, 4),
              "read_hours": round(maker.seconds_read / 3600, 4), "vad": data.vad, "kept_clips": len(clips),
              "kept_minutes": round(minutes, 2), "dropped": dict(maker.drops), "dropped_examples": maker.dropped,
              "transcribed_by_asr": sum(c.transcribed for c in clips),
              "dnsmos_ovrl_mean": round(float(np.mean(dnsmos)), 3) if dnsmos else None}
    if minutes < data.min_minutes or len(clips) < 2:
        atomic_write(work / REPORT_FILE, json.dumps(report, indent=1, ensure_ascii=False))
        dropped = ", ".join(f"{k} {v}" for k, v in maker.drops.items() if v) or "none"
        raise DataError(f"Only {minutes:.1f} min of usable clips ({len(clips)}) from {len(recordings)} recording(s); "
                        f"a voice needs at least data.min_minutes = {data.min_minutes:g} min. Dropped: {dropped} "
                        f"(see {work / REPORT_FILE}). Record more, or loosen the filters with --set data.KEY=...")
    train, held = split_heldout(clips, data.heldout_fraction)
    report.update(train_clips=len(train), heldout_clips=len(held))
    atomic_write(work / REPORT_FILE, json.dumps(report, indent=1, ensure_ascii=False))
    return MadeData(write_manifest(work / "train.jsonl", train, work, name),
                    write_manifest(work / "heldout.jsonl", held, work, name),
                    tuple(sorted({c.language for c in clips if c.language})), report)
