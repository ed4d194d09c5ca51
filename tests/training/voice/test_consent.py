"""training.voice.consent: the consent recording must be the recordings' speaker, saying the statement.

Real judges on espeak-ng audio made here: resemblyzer's encoder for the speaker, pocketsphinx for
the words. The recordings are the smoke's male voice (en+m3, hi+m3); the consent is that voice
reading the statement (accepted), a female voice reading it (refused with its similarity) or the
male voice saying other words (refused with its CER where pocketsphinx hears the language).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from evaluation.systems.espeak import _run_espeak
from rumik_app.audio import write_wav
from rumik_app.voices.package import VoiceError
from training.voice import smoke
from training.voice.cli import main as voice_main
from training.voice.consent import SIMILARITY_THRESHOLDS, ConsentError, similarity_threshold, verify_consent
from training.voice.create import create_voice
from training.voice.voice_config import ConsentConfig, DataConfig, VoiceConfig

OTHER_WORDS = "The museum opens at ten and closes at six, and the market is busy on Sunday mornings."


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    return smoke.make_recordings(tmp_path_factory.mktemp("recordings"), minutes=1.0)


def consent_clip(folder: Path, voice: str, text: str = smoke.STATEMENT) -> Path:
    return write_wav(folder / f"consent-{voice}.wav", _run_espeak(text, voice, wpm=150, pitch=48, amplitude=70))


def check(recordings: Path, consent: Path, asr: str | None = None, statement: str = smoke.STATEMENT,
          language: str = "en") -> dict:
    cfg = VoiceConfig(consent=ConsentConfig(asr=asr))
    return verify_consent(consent, statement, sorted(recordings.glob("*.wav")), cfg, language)


def test_the_recordings_speaker_reading_the_statement_is_accepted_with_the_figure(recordings, tmp_path):
    record = check(recordings, consent_clip(tmp_path, "en+m3"))
    speaker = record["speaker"]
    assert record["method"] == "recording" and speaker["passed"] and speaker["encoder"] == "resemblyzer"
    assert speaker["similarity"] >= speaker["threshold"] == SIMILARITY_THRESHOLDS["resemblyzer"]
    assert record["statement"] == {"judge": None, "skipped": "no ASR judge was given (--asr or --set consent.asr=SPEC)"}


def test_another_voice_is_refused_with_its_similarity_and_the_fix(recordings, tmp_path):
    with pytest.raises(ConsentError) as refused:
        check(recordings, consent_clip(tmp_path, "en+f3"))
    message = str(refused.value)
    similarity = float(message.split("similarity to the recordings is ")[1][:5])
    assert similarity < SIMILARITY_THRESHOLDS["resemblyzer"] and "needs >= 0.80" in message
    assert "--consent-document" in message and "does not say" not in message


def test_other_words_are_refused_where_pocketsphinx_hears_the_language(recordings, tmp_path):
    other = consent_clip(tmp_path, "en+m3", OTHER_WORDS)
    with pytest.raises(ConsentError, match=r"does not say the statement: CER 0\.[5-9]\d against it \(pocketsphinx"):
        check(recordings, other, asr="pocketsphinx")
    hindi = check(recordings, other, asr="pocketsphinx", statement="मैं सहमत हूँ।", language="hi")
    assert hindi["statement"] == {"judge": "pocketsphinx", "skipped": "pocketsphinx hears English only; the "
                                                                      "statement is in hi"}


def test_a_consent_clip_declaring_too_long_or_broken_is_refused_before_decoding(recordings, tmp_path):
    long_clip = tmp_path / "long.wav"
    soundfile.write(long_clip, np.zeros(8000 * 130, np.float32), 8000)
    with pytest.raises(ConsentError, match="cannot be used: .*long"):
        check(recordings, long_clip)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF" + b"\0" * 40)
    with pytest.raises(ConsentError, match="cannot be used"):
        check(recordings, broken)


def test_an_uncalibrated_encoder_needs_a_threshold():
    with pytest.raises(VoiceError, match="--set consent.min_similarity=0.8"):
        similarity_threshold("hf:someone/speaker-model", None)
    assert similarity_threshold("hf:someone/speaker-model", 0.7) == 0.7


def test_create_refuses_another_speakers_consent_before_the_model_loads(recordings, tmp_path, monkeypatch):
    def no_training(*_):
        raise AssertionError("the model must not load for a refused consent")

    monkeypatch.setattr("training.voice.voice_trainer.run", no_training)
    cfg = VoiceConfig(data=DataConfig(min_minutes=0.5))
    with pytest.raises(ConsentError, match="similarity to the recordings is 0"):
        create_voice("Arjun", recordings, consent_clip(tmp_path, "en+f3"), smoke.STATEMENT, tmp_path / "voices", cfg,
                     tmp_path / "work")
    assert not (tmp_path / "voices").exists() and not (tmp_path / "work" / "summary.json").exists()


def test_the_cli_takes_a_recording_or_a_document_not_both(tmp_path, capsys):
    base = ["create", "Arjun", "--audio", str(tmp_path), "--statement", "yes", "--out", str(tmp_path / "voices")]
    with pytest.raises(SystemExit) as exit_:
        voice_main(base + ["--consent", "a.wav", "--consent-document", "b.pdf"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    document = tmp_path / "signed.pdf"
    document.write_bytes(b"%PDF-1.4 signed")
    with pytest.raises(SystemExit) as exit_:
        voice_main(base + ["--consent", str(document)])
    assert exit_.value.code == 2 and "A .pdf goes to --consent-document" in capsys.readouterr().err
