"""The voice adaptation smoke run: `rumik voice create`'s whole path on CPU in about two minutes.

    rumik voice create --smoke --out /tmp/voices                  # voice Kabir, PASS or FAIL
    rumik voice create --smoke --out /tmp/voices --set train.steps=100
    folder = make_recordings(Path("/tmp/rec"), minutes=15)       # the recordings alone (tests)

1. recordings of one male espeak-ng voice (`en+m3` and `hi+m3`, speed and pitch varied a
   little per recording, silence around each), `minutes` long in all, each a few sentences
   with a same-stem .txt transcript, in WORK/recordings;
2. the base: `smoke_base()`, a random checkpoint in the published format (rumik_app.checkpoint.tiny)
   whose logit scale is SMOKE_LOGIT_SCALE instead of `--model tiny`'s 0.25, cached in
   ~/.cache/rumik/tiny-voice-v1. `--model tiny` cannot show an adapter learning: its hidden
   state leaves the frozen final norm with norm ~8 and its tied unit embeddings have norm
   ~0.16, so with logit scale 0.25 no logit moves by more than ~0.3 whatever the body does,
   and an adapter of the body lowers its loss by ~3% at most (measured: 2.9% at rank 16 with
   lr 3e-3 or 3e-2). Scale 4 gives logits a range like the real model's;
3. `rumik voice create` with SMOKE_SETTINGS (10 minutes of audio is required by default; the
   smoke makes SMOKE_MINUTES and lowers `data.min_minutes`), consent: the same voice reading
   STATEMENT (`make_consent`), so the consent checks run and pass;
4. the verdict: PASS iff the held-out teacher-forced loss of the new voice falls by at least
   MIN_LOSS_DROP with the adapter, and the built-in voices' loss on their own held-out
   samples moves by less than MAX_BUILTIN_DRIFT (replay works).

The codes of a random Mimi carry no speech, but one voice's codes have steady statistics
(a few dozen codes per codebook in use), which an adapter of the body can learn.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from rumik_app.audio import SAMPLE_RATE, write_wav
from rumik_app.files import atomic_write

SMOKE_NAME = "Kabir"
SMOKE_MINUTES = 5.0
SMOKE_LOGIT_SCALE = 4.0
SMOKE_BASE = "tiny-voice-v1"
MIN_LOSS_DROP = 0.20
MAX_BUILTIN_DRIFT = 0.05
ESPEAK_VOICES = (("en", "en+m3"), ("hi", "hi+m3"))
AMPLITUDE = 70  # espeak -a: en+m3 at the default 100 peaks at 0.999 of full scale (the clipping filter's level)
SILENCE_SECONDS = 0.4
NOISE_FLOOR = 1e-4
SENTENCES_PER_RECORDING = 3
SMOKE_THREADS = 1  # a hidden-64 model gains nothing from a second thread, and on a busy machine it is slower
STATEMENT = ("Smoke test of rumik voice create: the recordings are espeak-ng's synthetic male voice; "
             "no person's voice is used.")
SMOKE_SETTINGS = {
    "model": "",  # smoke_base(), filled in by smoke_config
    "torch_threads": SMOKE_THREADS,
    "data": {"min_minutes": 3.0},
    "replay": {"clips": 20, "heldout": 6, "weight": 0.5},
    "lora": {"rank": 16, "alpha": 32.0},
    "train": {"steps": 60, "batch": 8, "micro_batch": 8, "lr": 3e-3, "warmup_steps": 6, "eval_every": 30},
}
ENGLISH = (
    "Good morning, how are you today?", "The train to Delhi leaves at nine in the morning.",
    "Please call me when you reach the station tonight.", "Our meeting has been moved to Thursday afternoon.",
    "She reads a new book every week during the summer.", "The market is busy on Sunday mornings.",
    "Turn left at the second signal and go straight ahead.", "We planted mango trees behind the old school.",
    "I would like a cup of hot tea with ginger, please.", "The children played cricket until the sun went down.",
    "My grandmother tells the best stories about her village.", "It rained all night, so the roads are flooded.",
    "Could you send me the report before lunch?", "The museum opens at ten and closes at six.",
    "He forgot his umbrella at the bus stop again.", "Let us meet near the big banyan tree.",
)
HINDI = (
    "नमस्ते, आप कैसे हैं?", "आज मौसम बहुत अच्छा है।", "मुझे अदरक वाली चाय पसंद है।",
    "ट्रेन सुबह नौ बजे निकलती है।", "कृपया स्टेशन पहुँचकर मुझे फ़ोन करना।", "बच्चे शाम तक क्रिकेट खेलते रहे।",
    "बाज़ार रविवार को बहुत भरा रहता है।", "हम कल फिर मिलेंगे।", "मेरी दादी गाँव की कहानियाँ सुनाती हैं।",
    "रात भर बारिश हुई, इसलिए सड़कें भीग गईं।", "क्या आप दोपहर से पहले रिपोर्ट भेज सकते हैं?",
    "संग्रहालय दस बजे खुलता है।",
)


def recording_text(k: int) -> tuple[str, str, str]:
    """(language, espeak voice, text) of recording k: a few sentences of one language."""
    language, voice = ESPEAK_VOICES[k % len(ESPEAK_VOICES)]
    pool = ENGLISH if language == "en" else HINDI
    picks = [pool[(k // 2 * 5 + 3 * j) % len(pool)] for j in range(SENTENCES_PER_RECORDING)]
    return language, voice, " ".join(picks)


def make_recordings(folder: Path, minutes: float = SMOKE_MINUTES) -> Path:
    """Write espeak-ng recordings (24 kHz WAV + .txt) of one male voice until `minutes` are made."""
    from evaluation.systems.espeak import _run_espeak

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    silence = np.zeros(int(SILENCE_SECONDS * SAMPLE_RATE), np.float32)
    made, k = 0.0, 0
    while made < minutes * 60:
        language, voice, text = recording_text(k)
        speech = _run_espeak(text, voice, wpm=140 + 8 * (k % 4), pitch=40 + 4 * (k % 3), amplitude=AMPLITUDE)
        samples = np.concatenate([silence, speech, silence])
        samples = samples + NOISE_FLOOR * rng.standard_normal(len(samples)).astype(np.float32)
        write_wav(folder / f"{language}_{k:03d}.wav", samples)
        atomic_write(folder / f"{language}_{k:03d}.txt", text + "\n")
        made += len(speech) / SAMPLE_RATE
        k += 1
    return folder


def make_consent(path: Path) -> Path:
    """The smoke's consent recording: the recordings' voice (en+m3) reading STATEMENT, as a 24 kHz WAV."""
    from evaluation.systems.espeak import _run_espeak

    return write_wav(path, _run_espeak(STATEMENT, ESPEAK_VOICES[0][1], wpm=140, pitch=44, amplitude=AMPLITUDE))


def smoke_base() -> Path:
    """The smoke's base checkpoint (module docstring, step 2), built once under the rumik cache."""
    from rumik_app.checkpoint.load import cache_root
    from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint
    from rumik_app.files import fsync_tree

    path = cache_root() / SMOKE_BASE
    if not (path / "codec" / "model.safetensors").exists():
        cache_root().mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{SMOKE_BASE}-", dir=cache_root()))
        build_tiny_checkpoint(tmp, TinySpec(logit_scale=SMOKE_LOGIT_SCALE))
        fsync_tree(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process won the race; theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def smoke_overrides(model: str | None) -> dict:
    """SMOKE_SETTINGS with the base filled in (`model`: the user's --model, else smoke_base())."""
    return {**SMOKE_SETTINGS, "model": model or str(smoke_base())}


def smoke_verdict(figures: dict) -> tuple[bool, str]:
    """PASS iff the held-out loss fell by MIN_LOSS_DROP and the built-in voices moved less than MAX_BUILTIN_DRIFT."""
    drop, drift = figures["heldout_loss_drop"], figures["builtin_drift"]
    passed = drop >= MIN_LOSS_DROP and abs(drift) < MAX_BUILTIN_DRIFT
    return passed, (f"the new voice's held-out loss went {figures['heldout_loss_base']:.3f} -> "
                    f"{figures['heldout_loss_adapted']:.3f} with the adapter ({drop:.1%} lower; needs >= "
                    f"{MIN_LOSS_DROP:.0%}) and the built-in voices' {figures['builtin_loss_base']:.3f} -> "
                    f"{figures['builtin_loss_adapted']:.3f} ({drift:+.1%}; needs within ±{MAX_BUILTIN_DRIFT:.0%})")
