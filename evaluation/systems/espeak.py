"""espeak-ng: a classical formant-synthesis baseline that works fully offline.

    from evaluation.systems.espeak import espeak_synthesize, EspeakSystem
    audio = espeak_synthesize("नमस्ते, आप कैसे हैं?", voice="Ira", pace="slow", tone="happy")
    audio.samples  # float32 [N] mono at 24 kHz
    espeak_synthesize("Hello.", sample_rate=None).sample_rate   # 22050: espeak-ng's own rate, nothing converted

Mapping of the rumik-oss-1 request onto espeak-ng:
- voice -> a female espeak variant (VOICE_VARIANTS; all four voices are female-presenting);
- pace -> speaking rate in words per minute (PACE_WPM);
- tone -> pitch / amplitude / rate-factor preset (TONE_PRESETS);
- language -> espeak voice: the given language if espeak reads its script, else the voice
  for the text's dominant script (Perso-Arabic -> ur, Devanagari -> hi, ...). Ol Chiki
  (Santali) and Meetei Mayek (Manipuri) have no espeak reader: a clear error;
- inline tags -> short audible events: `<laugh>` "ha ha ha", `<chuckle>` a soft "heh heh",
  `<sigh>` a breathy band-passed noise burst; each surrounded by a short pause.
espeak-ng is run with subprocess (no shell), text on stdin, output to a temp WAV file; the
pieces are joined at espeak's 22.05 kHz and the whole converted once to the rate asked for (24 kHz
by default; the system returns espeak's own rate and `Synthesizer.synthesize` converts it, so the
benchmark runner's clips stay at 22.05 kHz and each judge converts them once).

Not a CLI; use it through the runner (`python -m evaluation.run --system espeak ...`).
Tested by tests/evaluation/test_systems.py.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import butter, sosfilt

from evaluation.audio_io import resample, to_mono
from evaluation.systems.base import SynthesisError, Synthesizer
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.prompt import PACES, TAG_PATTERN, TONES, normalize_voice, validate_text
from rumik_app.request import SynthesisRequest
from rumik_app.text.languages import dominant_script, get_language

# espeak variants per voice. f5 and f2 are the clearest espeak female variants for ASR
# (pocketsphinx WER on our English set is far lower than with f1/f3/f4), so the default
# voice Ira gets f5.
VOICE_VARIANTS: dict[str, str] = {"Ira": "f5", "Aisha": "f2", "Siya": "f4", "Zoya": "f3"}
PACE_WPM: dict[str, int] = {"slow": 120, "steady": 150, "fast": 185}
DEFAULT_PITCH = 50  # espeak -p, 0..99
DEFAULT_AMPLITUDE = 100  # espeak -a, 0..200
# tone -> (pitch, amplitude, rate factor)
TONE_PRESETS: dict[str, tuple[int, int, float]] = {
    "happy": (65, 110, 1.05),
    "sad": (35, 75, 0.85),
    "angry": (45, 150, 1.1),
    "excited": (75, 130, 1.15),
    "professional": (50, 100, 1.0),
}
# Our language codes -> espeak-ng voices. None: espeak cannot read the language's script.
LANGUAGE_VOICES: dict[str, str | None] = {
    "as": "as", "bn": "bn", "brx": "hi", "doi": "hi", "gu": "gu", "hi": "hi", "kn": "kn",
    "ks": "ur", "kok": "kok", "mai": "hi", "ml": "ml", "mni": None, "mr": "mr", "ne": "ne",
    "or": "or", "pa": "pa", "sa": "hi", "sat": None, "sd": "sd", "ta": "ta", "te": "te",
    "ur": "ur", "en": "en-us",
}
# Fallback by the text's dominant script.
SCRIPT_VOICES: dict[str, str] = {
    "Devanagari": "hi", "Bengali": "bn", "Gurmukhi": "pa", "Gujarati": "gu", "Odia": "or",
    "Tamil": "ta", "Telugu": "te", "Kannada": "kn", "Malayalam": "ml", "Arabic": "ur",
    "Latin": "en-us",
}
# Vocalisation events: (text spoken by the English voice, pitch offset, amplitude factor, wpm)
LAUGH_EVENTS: dict[str, tuple[str, int, float, int]] = {
    "<laugh>": ("ha ha ha", 15, 1.0, 200),
    "<chuckle>": ("heh heh", 10, 0.6, 210),
}
ESPEAK_RATE = 22_050  # espeak-ng's output rate; the pieces of a clip are joined at it
SIGH_SECONDS = 0.7
SIGH_BAND_HZ = (400.0, 2500.0)
SIGH_PEAK = 0.12
SIGH_ATTACK_S = 0.12
EVENT_PAUSE_S = 0.12
ESPEAK_TIMEOUT_S = 120
SCRIPT_NAMES = {"OlChiki": "Ol Chiki", "MeeteiMayek": "Meetei Mayek", "Arabic": "Perso-Arabic"}
INSTALL_HINT = "Install it: apt-get install espeak-ng (macOS: brew install espeak-ng)."


@functools.lru_cache(maxsize=1)
def espeak_executable() -> str:
    """Path of espeak-ng (or espeak); SynthesisError naming the fix if neither is on PATH."""
    exe = shutil.which("espeak-ng") or shutil.which("espeak")
    if exe is None:
        raise SynthesisError(f"espeak-ng is not installed or not on PATH. {INSTALL_HINT}")
    return exe


@functools.lru_cache(maxsize=1)
def available_voices() -> frozenset[str]:
    """Language codes of the installed espeak-ng voices (from `espeak-ng --voices`)."""
    proc = subprocess.run([espeak_executable(), "--voices"], capture_output=True, timeout=ESPEAK_TIMEOUT_S,
                          check=False)
    lines = proc.stdout.decode("utf-8", "replace").splitlines()[1:]
    return frozenset(line.split()[1] for line in lines if len(line.split()) > 1)


def espeak_voice_for(text: str, language: str | None = None) -> str:
    """The espeak-ng voice for `text`: the language's voice when espeak reads the text's
    script in that language, else the voice of the dominant script."""
    script = dominant_script(text)
    installed = available_voices()
    if language:
        lang = get_language(language)
        voice = LANGUAGE_VOICES.get(lang.code)
        if voice and lang.script == script and voice in installed:
            return voice
    voice = SCRIPT_VOICES.get(script)
    if voice is None:
        raise SynthesisError(
            f"espeak-ng has no reader for {SCRIPT_NAMES.get(script, script)} script"
            + (f" ({get_language(language).name})" if language else "")
            + "; the espeak baseline cannot speak this text. Use another system for this language."
        )
    if voice not in installed:
        fallback = "en" if voice.startswith("en") and "en" in installed else None
        if fallback is None:
            raise SynthesisError(f"The espeak-ng voice {voice!r} is not installed. {INSTALL_HINT}")
        voice = fallback
    return voice


def _run_espeak(text: str, voice: str, wpm: int, pitch: int, amplitude: int,
                sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Speak `text` with espeak-ng; float32 mono [N] at `sample_rate`, converted once from espeak's rate."""
    exe = espeak_executable()
    with tempfile.TemporaryDirectory(prefix="espeak_") as tmp:
        out = Path(tmp) / "out.wav"
        cmd = [exe, "-v", voice, "-s", str(wpm), "-p", str(pitch), "-a", str(amplitude), "-b", "1",
               "-w", str(out), "--stdin"]
        try:
            proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True,
                                  timeout=ESPEAK_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SynthesisError(f"espeak-ng took over {ESPEAK_TIMEOUT_S} s for {len(text)} characters.") from exc
        if proc.returncode != 0 or not out.is_file():
            detail = proc.stderr.decode("utf-8", "replace").strip() or f"exit code {proc.returncode}"
            raise SynthesisError(f"espeak-ng failed with voice {voice!r}: {detail}")
        data, sr = sf.read(str(out), dtype="float32", always_2d=False)
    return resample(to_mono(data), int(sr), sample_rate)


def sigh_burst(seed: int = 0, seconds: float = SIGH_SECONDS, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A breathy exhale: band-passed white noise with a fast attack and a long decay,
    float32 [seconds * sample_rate]; deterministic for a given seed."""
    n = int(seconds * sample_rate)
    noise = np.random.default_rng(seed).standard_normal(n)
    sos = butter(4, SIGH_BAND_HZ, btype="bandpass", fs=sample_rate, output="sos")
    breath = sosfilt(sos, noise)
    t = np.arange(n) / sample_rate
    envelope = np.minimum(1.0, t / SIGH_ATTACK_S) * np.exp(-3.0 * np.maximum(0.0, t - SIGH_ATTACK_S) / seconds)
    breath = breath * envelope
    return (breath / (np.max(np.abs(breath)) + 1e-9) * SIGH_PEAK).astype(np.float32)


def _settings(voice: str, pace: str | None, tone: str | None) -> tuple[str, int, int, int]:
    """(variant, wpm, pitch, amplitude) for the request fields (case-insensitive)."""
    voice = normalize_voice(voice)
    wpm = PACE_WPM["steady"]
    if pace:
        key = pace.strip().lower()
        if key not in PACE_WPM:
            raise SynthesisError(f"Unknown pace {pace!r}. Choose one of: {', '.join(PACES)}.")
        wpm = PACE_WPM[key]
    pitch, amplitude, factor = DEFAULT_PITCH, DEFAULT_AMPLITUDE, 1.0
    if tone:
        key = tone.strip().lower()
        if key not in TONE_PRESETS:
            raise SynthesisError(f"Unknown tone {tone!r}. Choose one of: {', '.join(TONES)}.")
        pitch, amplitude, factor = TONE_PRESETS[key]
    return VOICE_VARIANTS[voice], int(round(wpm * factor)), pitch, amplitude


def espeak_synthesize(text: str, language: str | None = None, voice: str = "Ira", pace: str | None = None,
                      tone: str | None = None, seed: int = 0, sample_rate: int | None = SAMPLE_RATE) -> Audio:
    """Speak `text` (inline tags allowed) with espeak-ng: float32 mono [N] at `sample_rate`
    (default 24 kHz; None: espeak's own ESPEAK_RATE, nothing converted).

    language: ISO code or name; None picks the voice from the text's script.
    seed: only shapes the sigh noise (espeak itself is deterministic).
    Raises PromptError for bad text/voice and SynthesisError for espeak problems.
    """
    text = validate_text(text)
    variant, wpm, pitch, amplitude = _settings(voice, pace, tone)
    spoken = TAG_PATTERN.sub(" ", text)
    espeak_voice = espeak_voice_for(spoken if spoken.strip() else "a", language)
    event_voice = espeak_voice_for("a", "en")
    pause = np.zeros(int(EVENT_PAUSE_S * ESPEAK_RATE), dtype=np.float32)
    pieces: list[np.ndarray] = []
    events: list[str] = []
    last = 0
    for match in list(TAG_PATTERN.finditer(text)) + [None]:
        segment = text[last: match.start() if match else len(text)].strip()
        if segment and any(ch.isalnum() for ch in segment):
            pieces.append(_run_espeak(segment, f"{espeak_voice}+{variant}", wpm, pitch, amplitude, ESPEAK_RATE))
        if match is None:
            break
        tag = match.group(0)
        events.append(tag)
        pieces.append(pause)
        if tag == "<sigh>":
            pieces.append(sigh_burst(seed + len(events), sample_rate=ESPEAK_RATE))
        else:
            words, dp, amp_factor, ewpm = LAUGH_EVENTS[tag]
            pieces.append(_run_espeak(words, f"{event_voice}+{variant}", ewpm, min(99, pitch + dp),
                                      int(amplitude * amp_factor), ESPEAK_RATE))
        pieces.append(pause)
        last = match.end()
    rate = ESPEAK_RATE if sample_rate is None else int(sample_rate)
    samples = resample(np.concatenate(pieces) if pieces else pause, ESPEAK_RATE, rate)  # once, the whole clip
    info = {"espeak_voice": f"{espeak_voice}+{variant}", "wpm": wpm, "pitch": pitch, "amplitude": amplitude,
            "events": events}
    return Audio(samples=np.clip(samples, -1.0, 1.0).astype(np.float32), sample_rate=rate, seed=seed, info=info)


class EspeakSystem(Synthesizer):
    """The espeak-ng classical baseline as a benchmark/app system."""

    name = "espeak"
    label = "espeak-ng (classical baseline)"

    def __init__(self) -> None:
        espeak_executable()  # fail at load time, with the install hint, if missing

    def _synthesize(self, request: SynthesisRequest, *, clip_id: str | None, run: int | None) -> Audio:
        seed = request.seed if request.seed is not None else 0
        # The baseline reads the same normalised text as the model (numbers as words) unless
        # the request says normalize=False.
        # at espeak's own rate: `synthesize` converts it once (to 24 kHz, or not at all with native=True)
        return espeak_synthesize(request.spoken_text(), language=request.language, voice=request.voice,
                                 pace=request.pace, tone=request.tone, seed=seed, sample_rate=None)

    def fingerprint(self) -> str:
        """espeak-ng's version line: its voices change only with the program."""
        proc = subprocess.run([espeak_executable(), "--version"], capture_output=True, timeout=ESPEAK_TIMEOUT_S,
                              check=False)
        return f"espeak: {proc.stdout.decode('utf-8', 'replace').strip()}"

    def settings(self) -> dict:
        return {**super().settings(), "voice_variants": VOICE_VARIANTS, "pace_wpm": PACE_WPM}
