"""A small speech corpus for `training.prepare`, made on the fly with espeak-ng (tests and benchmarks).

`make_corpus` writes short clips in English, Hindi and Tamil plus a few long English recordings (sentences
joined by pauses of faint noise) and their manifest; `make_planted` writes good clips plus one planted bad clip
per data filter, with the transcripts a stand-in ASR judge reads. Both are deterministic: the same call
writes the same files byte for byte. espeak-ng writes 22050 Hz mono 16-bit WAV; the files keep that format.
"""

from __future__ import annotations

import json
import random
import subprocess
import tempfile
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

RATE = 22_050  # espeak-ng's output rate
VOICES = {"en": "en-us", "hi": "hi", "ta": "ta"}
LANGUAGES = tuple(VOICES)
SPEAKERS = ("Ira", "aisha", "Siya")
CLIP_SECONDS = (1.0, 6.0)
PLANTED_SEED = 1234
ESPEAK_TIMEOUT_S = 60


def _words(text: str) -> tuple[str, ...]:
    return tuple(unicodedata.normalize("NFC", w) for w in text.split())


WORDS = {
    "en": _words("apple river house green small morning light garden window happy quiet music water bread friend "
                 "city road table yellow summer winter chair paper teacher family market little bright simple warm "
                 "evening kitchen letter mountain story doctor orange blue cold rain"),
    "hi": _words("घर पानी खाना दोस्त किताब बच्चा सुबह शाम रात दिन आज कल मौसम अच्छा बड़ा छोटा नया पुराना सुंदर गाना "
                 "बाजार शहर गांव रास्ता पेड़ फूल आसमान बारिश धूप हवा दूध चाय माँ पिता भाई बहन स्कूल काम"),
    "ta": _words("வணக்கம் நண்பன் வீடு தண்ணீர் சாப்பாடு புத்தகம் குழந்தை காலை மாலை இரவு பகல் இன்று நாளை மழை "
                 "வெயில் காற்று மரம் பூ வானம் நல்ல பெரிய சிறிய புதிய அழகான பாட்டு கடை ஊர் தெரு பள்ளி வேலை அம்மா "
                 "அப்பா அண்ணன் தங்கை பால் தேநீர் நிலா கடல்"),
}

Job = tuple[str, str, int, int, Path]  # text, espeak voice, speed (words/min), pitch (0-99), output path


def sentence(rng: random.Random, language: str, low: int = 3, high: int = 10,
             avoid: frozenset[str] = frozenset()) -> str:
    """A seeded sentence of `low`-`high` plain words (no word of `avoid`) and a final full stop."""
    pool = [w for w in WORDS[language] if w not in avoid]
    text = " ".join(rng.choice(pool) for _ in range(rng.randint(low, high)))
    return (text[0].upper() + text[1:] if language == "en" else text) + "."


def spoken(text: str) -> str:
    """The words of a sentence as a transcript: lower case, no full stop."""
    return text.rstrip(".").lower()


def _job(rng: random.Random, text: str, language: str, path: Path) -> Job:
    return text, VOICES[language], rng.randint(140, 190), rng.randint(30, 70), path


def _espeak(job: Job) -> None:
    text, voice, speed, pitch, path = job
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(path), text],
                   check=True, capture_output=True, timeout=ESPEAK_TIMEOUT_S)


def speak_all(jobs: list[Job]) -> None:
    """Run espeak-ng for every job, two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_espeak, jobs))


def read(path: Path) -> np.ndarray:
    return sf.read(path, dtype="float32")[0]


def write(path: Path, samples: np.ndarray) -> None:
    sf.write(path, np.clip(samples, -1.0, 1.0), RATE, subtype="PCM_16")


def _speak_rows(root: Path, rows: list[dict], rng: random.Random, rounds: int = 20) -> None:
    """Give each row a seeded sentence in its language and speak it; redo (new sentence, speed, pitch)
    the clips outside CLIP_SECONDS until all fit."""
    pending = list(range(len(rows)))
    for _ in range(rounds):
        jobs = []
        for k in pending:
            rows[k]["text"] = sentence(rng, rows[k]["language"])
            jobs.append(_job(rng, rows[k]["text"], rows[k]["language"], root / rows[k]["audio"]))
        speak_all(jobs)
        low, high = CLIP_SECONDS
        pending = [k for k in pending if not low <= sf.info(root / rows[k]["audio"]).duration <= high]
        if not pending:
            return
    raise RuntimeError(f"espeak-ng clips outside {CLIP_SECONDS} s after {rounds} tries: {pending}")


def _long_recording(root: Path, name: str, rng: random.Random, noise: np.random.Generator,
                    seconds: float) -> dict:
    """English sentences joined by 0.4-1.5 s pauses of faint noise, about `seconds` long."""
    target, pieces, texts, total = seconds * RATE, [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        batch = 0
        while True:
            jobs = [_job(rng, sentence(rng, "en"), "en", Path(tmp) / f"{batch}_{i}.wav") for i in range(8)]
            speak_all(jobs)
            for text, *_, path in jobs:
                speech = read(path)
                pause = noise.normal(0.0, 1e-4, int(rng.uniform(0.4, 1.5) * RATE)).astype(np.float32)
                add = ([pause] if pieces else []) + [speech]
                size = sum(len(p) for p in add)
                if pieces and total + size - target > target - total:  # adding overshoots more than stopping
                    write(root / name, np.concatenate(pieces))
                    return {"audio": name, "text": " ".join(texts), "speaker": rng.choice(SPEAKERS),
                            "language": "en"}
                pieces += add
                texts.append(text)
                total += size
            batch += 1


def make_corpus(root: Path, clips: int = 200, seed: int = 0, long_recordings: int = 2,
                long_seconds: float = 45.0) -> Path:
    """Write `clips` manifest rows in 3 languages (en, hi, ta), espeak-ng speech, into root; return the manifest path.

    Short clips (1-6 s, languages in turn, seeded sentence, speaker, speed and pitch) are
    audio/<lang>_<k>.wav; `long_recordings` of them are replaced, at seeded positions, by English
    recordings of about `long_seconds` s (audio/long_<k>.wav, text: the whole transcript).
    """
    root = Path(root)
    (root / "audio").mkdir(parents=True, exist_ok=True)
    rng, noise = random.Random(seed), np.random.default_rng(seed)
    n_long = min(max(long_recordings, 0), clips)
    rows = []
    for k in range(clips - n_long):
        language = LANGUAGES[k % len(LANGUAGES)]
        rows.append({"audio": f"audio/{language}_{k}.wav", "text": "", "speaker": rng.choice(SPEAKERS),
                     "language": language})
    _speak_rows(root, rows, rng)
    positions = sorted(rng.sample(range(clips), n_long))
    for k, position in enumerate(positions):
        rows.insert(position, _long_recording(root, f"audio/long_{k}.wav", rng, noise, long_seconds))
    manifest = root / "clips.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return manifest


def speech_rms(samples: np.ndarray, frame_s: float = 0.032, range_db: float = 30.0) -> float:
    """RMS of the speech frames: the 32 ms frames within `range_db` of the loudest one."""
    size = int(round(frame_s * RATE))
    frames = samples[: len(samples) // size * size].reshape(-1, size).astype(np.float64)
    power = np.mean(frames**2, axis=1)
    return float(np.sqrt(np.mean(power[power >= power.max() * 10 ** (-range_db / 10)])))


def make_planted(root: Path) -> tuple[Path, dict[str, str]]:
    """A small manifest of good clips plus one planted bad clip per filter; returns
    (manifest, {audio: expected_reason_key}).

    Planted: silent.wav (noise at 1e-5) -> "silent"; clipped.wav (x20, clipped) -> "clipped"; noisy.wav
    (white noise std 0.3, speech peak 0.5) -> "low_dnsmos"; lownsr.wav (steady noise 5 dB below the speech
    frames' RMS) -> "low_snr"; wrong.wav (text of another sentence) -> "high_cer"; short.wav (0.5 s "hi")
    -> "too_short". root/transcripts.json maps every row's audio to the words actually spoken in it.
    """
    root = Path(root)
    (root / "audio").mkdir(parents=True, exist_ok=True)
    rng, noise = random.Random(PLANTED_SEED), np.random.default_rng(PLANTED_SEED)
    rows = [{"audio": f"audio/en_{k}.wav", "text": "", "speaker": rng.choice(SPEAKERS), "language": "en"}
            for k in range(8)]
    _speak_rows(root, rows, rng)
    said = {r["audio"]: spoken(r["text"]) for r in rows}
    expected = {"audio/silent.wav": "silent", "audio/clipped.wav": "clipped", "audio/noisy.wav": "low_dnsmos",
                "audio/lownsr.wav": "low_snr", "audio/wrong.wav": "high_cer", "audio/short.wav": "too_short"}
    texts = {name: sentence(rng, "en", 5, 9) for name in expected}
    texts["audio/short.wav"] = "Hi."
    wrong_text = sentence(rng, "en", 5, 9, avoid=frozenset(spoken(texts["audio/wrong.wav"]).split()))
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {name: _job(rng, text, "en", Path(tmp) / Path(name).name) for name, text in texts.items()}
        jobs["audio/short.wav"] = ("hi", VOICES["en"], 175, 50, Path(tmp) / "short.wav")
        jobs["audio/wrong.wav"] = (*jobs["audio/wrong.wav"][:-1], root / "audio/wrong.wav")  # kept as espeak wrote it
        speak_all(list(jobs.values()))
        speech = {name: read(job[-1]) for name, job in jobs.items()}
    write(root / "audio/silent.wav", noise.normal(0.0, 1e-5, 3 * RATE))
    write(root / "audio/clipped.wav", speech["audio/clipped.wav"] * 20)
    loud = speech["audio/noisy.wav"] * (0.5 / np.abs(speech["audio/noisy.wav"]).max())
    write(root / "audio/noisy.wav", loud + noise.normal(0.0, 0.3, len(loud)))
    quiet = speech["audio/lownsr.wav"]
    write(root / "audio/lownsr.wav", quiet + noise.normal(0.0, speech_rms(quiet) * 10 ** (-5 / 20), len(quiet)))
    write(root / "audio/short.wav", np.pad(speech["audio/short.wav"], (0, RATE))[: RATE // 2])
    for name, text in texts.items():
        rows.append({"audio": name, "text": wrong_text if name == "audio/wrong.wav" else text,
                     "speaker": rng.choice(SPEAKERS), "language": "en"})
        said[name] = "" if name == "audio/silent.wav" else spoken(text)
    manifest = root / "planted.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (root / "transcripts.json").write_text(json.dumps(said, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest, expected
