"""The consent recording's checks in `rumik voice create`: it must be the recordings' speaker, saying the statement.

    verification = verify_consent(Path("consent.wav"), statement, clip_paths, cfg)   # ConsentError if refused
    verification["speaker"]["similarity"]    # cosine to the recordings' mean embedding (kept in voice.json)
    document_verification()                  # --consent-document: a signed document, the audio checks skipped

- speaker: the speaker encoder (`eval.speaker_encoder`) embeds the consent recording and at most
  REFERENCE_CLIPS of the kept clips; the cosine with the clips' mean embedding must reach
  `consent.min_similarity` (None: the encoder's calibrated threshold in SIMILARITY_THRESHOLDS).
- statement: where an ASR judge hears the statement's language (`consent.asr`, else `eval.asr`;
  pocketsphinx only English), the transcript's CER against the statement must be at most
  `consent.max_cer`. Without one the record says the words were not checked, and why.

The thresholds and how they were measured are in docs/voices.md ("Consent checks"). Both checks run
after the clips are cut and before the model loads, so a refusal costs no training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rumik_app.voices.package import VoiceError

REFERENCE_CLIPS = 32  # clips in the reference embedding, spread over the kept clips (more only costs time)
MAX_CONSENT_SECONDS = 120.0  # read from the header before decoding
# The lowest cosine accepted per encoder. resemblyzer: measured here on espeak-ng (docs/voices.md): the
# recordings' own voice reading the statement 0.945-0.949 (other speed, other language), other male
# voices 0.81-0.92, female 0.67-0.73. WavLM x-vector: the 0.86 of its model card.
SIMILARITY_THRESHOLDS = {"resemblyzer": 0.80, "hf:microsoft/wavlm-base-plus-sv": 0.86}
ENGLISH_ONLY_JUDGES = ("pocketsphinx",)
REFUSED_FIX = ("The consent must be recorded by the person in the recordings, reading the statement shown. "
               "Record it again, or give a signed document with --consent-document instead of --consent.")


class ConsentError(VoiceError):
    """The consent recording failed a check; the message has the figures and what to do."""


def similarity_threshold(encoder: str, configured: float | None) -> float:
    """`consent.min_similarity`, else the encoder's calibrated threshold (VoiceError for an uncalibrated one)."""
    if configured is not None:
        return configured
    if encoder not in SIMILARITY_THRESHOLDS:
        raise VoiceError(f"No calibrated consent threshold for the speaker encoder {encoder!r} (calibrated: "
                         f"{', '.join(SIMILARITY_THRESHOLDS)}): set one with --set consent.min_similarity=0.8.")
    return SIMILARITY_THRESHOLDS[encoder]


def reference_clips(paths: Sequence[Path]) -> list[Path]:
    """At most REFERENCE_CLIPS of the clips, evenly spread."""
    picks = np.linspace(0, len(paths) - 1, num=min(len(paths), REFERENCE_CLIPS)).round().astype(int)
    return [paths[k] for k in sorted(set(picks.tolist()))]


def speaker_check(consent: np.ndarray, sample_rate: int, clips: Sequence[Path], encoder_spec: str,
                  threshold: float) -> dict[str, Any]:
    """{"encoder", "similarity", "threshold", "passed"}: the consent [N] against the clips' mean embedding."""
    from evaluation.speaker import cosine, load_speaker_encoder, mean_embedding

    encoder = load_speaker_encoder(encoder_spec)
    reference = mean_embedding(encoder.embed([str(path) for path in reference_clips(clips)]))
    similarity = cosine(reference, encoder.embed([consent], sample_rate)[0])
    return {"encoder": encoder_spec, "similarity": round(similarity, 4), "threshold": threshold,
            "reference_clips": min(len(clips), REFERENCE_CLIPS), "passed": similarity >= threshold}


def statement_check(consent: np.ndarray, sample_rate: int, statement: str, language: str | None,
                    asr_spec: str | None, max_cer: float) -> dict[str, Any]:
    """{"judge", "cer", "max_cer", "transcript", "passed"}, or {"judge": None, "skipped": why}."""
    if not asr_spec:
        return {"judge": None, "skipped": "no ASR judge was given (--asr or --set consent.asr=SPEC)"}
    if asr_spec in ENGLISH_ONLY_JUDGES and language != "en":
        return {"judge": asr_spec, "skipped": f"{asr_spec} hears English only; the statement is in {language}"}
    from evaluation.asr import load_asr
    from evaluation.metrics import cer

    transcript = load_asr(asr_spec).transcribe(consent, sample_rate, language)
    error = cer(statement, transcript)
    return {"judge": asr_spec, "cer": round(error, 4), "max_cer": max_cer, "transcript": transcript[:400],
            "passed": error <= max_cer}


def verify_consent(recording: Path, statement: str, clips: Sequence[Path], cfg, language: str | None) -> dict:
    """Both checks of the consent recording (module docstring) under a VoiceConfig `cfg`; the record
    for voice.json, or ConsentError with the figures when either fails."""
    from evaluation.audio_io import AudioLoadError, load_native

    threshold = similarity_threshold(cfg.eval.speaker_encoder, cfg.consent.min_similarity)
    try:
        audio = load_native(recording, max_seconds=MAX_CONSENT_SECONDS)
    except AudioLoadError as exc:
        raise ConsentError(f"The consent recording cannot be used: {exc}") from None
    speaker = speaker_check(audio.samples, audio.sample_rate, clips, cfg.eval.speaker_encoder, threshold)
    words = statement_check(audio.samples, audio.sample_rate, statement, language,
                            cfg.consent.asr or cfg.eval.asr, cfg.consent.max_cer)
    problems = []
    if not speaker["passed"]:
        problems.append(f"its speaker similarity to the recordings is {speaker['similarity']:.3f} "
                        f"({speaker['encoder']}; needs >= {threshold:.2f})")
    if words.get("passed") is False:
        problems.append(f"it does not say the statement: CER {words['cer']:.2f} against it ({words['judge']}; "
                        f"needs <= {words['max_cer']:.2f}; heard {words['transcript'][:80]!r})")
    if problems:
        raise ConsentError(f"The consent recording was refused: {'; '.join(problems)}. {REFUSED_FIX}")
    return {"method": "recording", "speaker": speaker, "statement": words}


def document_verification() -> dict:
    """The record of a consent given as a signed document: kept, not checked by machine."""
    return {"method": "document", "note": "a signed document (--consent-document); the audio checks were skipped"}
