"""Fixtures of the evaluation tests: speech clips made with espeak-ng on the fly (22.05 kHz WAV)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SENTENCE_1 = "Hello world, this is a test of the speech quality judge. The quick brown fox jumps over the lazy dog."
SENTENCE_2 = "Another sentence, spoken by the same voice, about the weather in the mountains this morning."
# name -> (espeak-ng voice, text): one voice on two sentences, another voice on the second.
CLIPS = {
    "f5_one": ("en-us+f5", SENTENCE_1),
    "f5_two": ("en-us+f5", SENTENCE_2),
    "m3_two": ("en-us+m3", SENTENCE_2),
}


def espeak_wav(path: Path, voice: str, text: str) -> Path:
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    return path


@pytest.fixture(scope="session")
def speech_clips(tmp_path_factory) -> dict[str, Path]:
    """Paths of the CLIPS, spoken once per test session."""
    folder = tmp_path_factory.mktemp("espeak")
    return {name: espeak_wav(folder / f"{name}.wav", voice, text) for name, (voice, text) in CLIPS.items()}
