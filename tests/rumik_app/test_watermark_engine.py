"""The watermark in the engines (rumik_app.watermark, BaseEngine.watermark): streams marked piece by
piece equal to the clip marked whole, and the policy on every audio path of a library voice.

Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_watermark_engine.py

The tiny checkpoint's random Mimi makes noise-like audio; PerthNet reads its mark on it all the
same (clean about 1e-4, marked above 0.95, measured), so these tests detect on it. The server's
path (its scheduler's streamed pieces) is tested in tests/rumik_app/test_serve_voices.py.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from importlib import metadata

import numpy as np
import pytest
import soundfile as sf

from rumik_app.cli_args import add_voices_argument, engine_kwargs
from rumik_app.engine.loading import load_engine
from rumik_app.engine.stream import STREAM_ATOL
from rumik_app.errors import PromptError
from rumik_app.request import SynthesisRequest
from rumik_app.synthesize import main as synthesize_main
from rumik_app.voices.library import VoiceLibrary
from rumik_app.voices.package import base_fingerprint
from rumik_app.voices.tiny import build_random_voice
from rumik_app.watermark import WatermarkError, WatermarkUnavailable
from rumik_app.watermark.marker import THRESHOLD, resample, shared_watermarker
from rumik_app.watermark.stream import StreamWatermarker

RATE = 24_000
STREAM_TOLERANCE = 1e-6  # a stream marked in pieces vs the clip marked whole (measured at most 1e-7)
TEXT = "Hello there, how are you doing today?"


@pytest.fixture(scope="module")
def marker():
    return shared_watermarker()


@pytest.fixture(scope="module")
def engine(tiny_checkpoint, tmp_path_factory):
    """A tiny engine serving a random library voice, Arjun, besides the built-in ones."""
    engine = load_engine(str(tiny_checkpoint), device="cpu")
    folder = tmp_path_factory.mktemp("voices")
    build_random_voice(folder, engine.model, "Arjun", tiny_checkpoint, seed=1)
    engine.use_voices(VoiceLibrary(folder, base_fingerprint(tiny_checkpoint)))
    return engine


@pytest.fixture(scope="module")
def clip(engine) -> np.ndarray:
    """2.4 s of the tiny checkpoint's (unmarked) audio."""
    engine.watermark = "off"
    try:
        return engine.synthesize(SynthesisRequest(TEXT, seed=3, max_new_tokens=240)).samples
    finally:
        engine.watermark = "library"


def request(voice: str) -> SynthesisRequest:
    return SynthesisRequest(TEXT, voice=voice, seed=5, max_new_tokens=160)


def streamed(engine, req: SynthesisRequest) -> np.ndarray:
    return np.concatenate(list(engine.stream(req)))


def test_the_detector_reads_the_mark_on_the_tiny_checkpoints_noise(marker, clip):
    assert marker.detect(clip, RATE) < 0.01
    assert marker.detect(marker.apply(clip, RATE), RATE) > 0.95


@pytest.mark.parametrize("rate", [24_000, 32_000])  # through soxr both ways; perth's own rate, no resampling
def test_a_stream_marked_in_uneven_pieces_equals_the_clip_marked_whole(marker, clip, rate):
    wave = resample(clip, RATE, rate)
    whole = marker.apply(wave, rate)
    sizes = [1, 7, 1919, 3840, 13] + list(np.random.default_rng(0).integers(1, 9000, 30))
    stream, out, given, lags = StreamWatermarker(marker, rate), [], 0, []
    for size in sizes:
        out.append(stream.push(wave[given: given + size]))
        given = min(given + size, wave.size)
        lags.append(given - sum(piece.size for piece in out))
    out.append(stream.finish())
    got = np.concatenate(out)
    assert got.shape == whole.shape and np.max(np.abs(got - whole)) <= STREAM_TOLERANCE
    assert max(lags) <= stream.latency_seconds() * rate  # what it holds back, at most
    assert marker.detect(got, rate) > 0.95


def test_an_empty_stream_stays_empty_and_a_too_short_one_is_refused(marker):
    empty = StreamWatermarker(marker, RATE)
    assert empty.finish().size == 0
    short = StreamWatermarker(marker, RATE)
    assert short.push(np.zeros(100, np.float32)).size == 0
    with pytest.raises(WatermarkError, match="too short"):
        short.finish()


def test_a_library_voice_is_marked_offline_and_streamed_alike(engine, marker):
    audio = engine.synthesize(request("arjun"))
    assert audio.info["watermarked"] and marker.detect(audio.samples, RATE) > 0.95
    stats: dict = {}
    pieces = list(engine.stream(request("arjun"), stats=stats))
    assert stats["watermarked"] and len(pieces) > 1
    # the same tokens; Mimi's streaming decode differs by float rounding, and the mark adds none
    assert np.max(np.abs(np.concatenate(pieces) - audio.samples)) <= STREAM_ATOL


def test_a_builtin_voice_is_untouched_bit_for_bit_under_the_default(engine, marker):
    assert engine.watermark == "library"
    audio = engine.synthesize(request("Ira"))
    assert not audio.info["watermarked"] and marker.detect(audio.samples, RATE) < THRESHOLD
    stream = streamed(engine, request("Ira"))
    engine.watermark = "off"  # the path without any watermark code: what the engine made before
    try:
        assert np.array_equal(engine.synthesize(request("Ira")).samples, audio.samples)
        assert np.array_equal(streamed(engine, request("Ira")), stream)
    finally:
        engine.watermark = "library"


def test_all_marks_a_builtin_voice_and_off_marks_nothing(engine, marker):
    try:
        engine.watermark = "all"
        assert marker.is_watermarked(engine.synthesize(request("Ira")).samples, RATE)
        assert marker.is_watermarked(streamed(engine, request("Ira")), RATE)
        engine.watermark = "off"
        assert not marker.is_watermarked(engine.synthesize(request("Arjun")).samples, RATE)
        assert not marker.is_watermarked(streamed(engine, request("Arjun")), RATE)
        with pytest.raises(ValueError, match="library, all, off"):
            engine.watermark = "sometimes"
        engine.watermark = "library"  # any voice but the checkpoint's own: one deleted mid-request stays marked
        assert engine.watermarker_for(request("Deleted")) is not None and engine.watermarker_for(request("ira")) is None
    finally:
        engine.watermark = "library"


@contextlib.contextmanager
def perth_uninstalled(monkeypatch) -> Iterator[None]:
    """resemble-perth uninstalled, as far as the watermark can tell (also tests/rumik_app/test_serve_voices.py)."""
    def distribution(name):
        raise metadata.PackageNotFoundError(name)

    shared_watermarker.cache_clear()
    with monkeypatch.context() as patch:
        patch.setattr("rumik_app.watermark.marker.metadata.distribution", distribution)
        yield
    shared_watermarker.cache_clear()


def test_without_resemble_perth_a_library_voice_is_refused_and_a_builtin_speaks(engine, monkeypatch):
    with perth_uninstalled(monkeypatch):
        for speak in (engine.synthesize, lambda req: next(iter(engine.stream(req)))):
            with pytest.raises(WatermarkUnavailable, match=r"pip install resemble-perth==1\.0\.1"):
                speak(request("Arjun"))
        assert engine.synthesize(request("Ira")).samples.size  # the default needs no watermark for it
        with pytest.raises(PromptError, match="Nobody"):  # an unknown voice is refused as such
            engine.synthesize(request("Nobody"))


def test_the_flag_reaches_the_engine(tiny_checkpoint, tmp_path, marker):
    parser = argparse.ArgumentParser()
    add_voices_argument(parser)
    assert engine_kwargs(parser.parse_args([]))["backend"] == "engine"
    assert "watermark" not in engine_kwargs(parser.parse_args([]))  # the engine's default
    assert engine_kwargs(parser.parse_args(["--watermark", "off"]))["watermark"] == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["--watermark", "sometimes"])
    with pytest.raises(ValueError, match="library, all, off"):
        load_engine(str(tiny_checkpoint), watermark="sometimes")  # before loading anything
    out = tmp_path / "ira.wav"
    assert synthesize_main(["--model", str(tiny_checkpoint), "--device", "cpu", "--text", TEXT, "--voice", "Ira",
                            "--max-seconds", "1", "--quiet", "--watermark", "all", "--out", str(out)]) == 0
    wave, rate = sf.read(out, dtype="float32")
    assert marker.is_watermarked(wave, rate)


def test_the_light_rate_constant_is_the_networks():
    from rumik_app.watermark import perth_net
    from rumik_app.watermark.marker import PERTH_RATE

    assert PERTH_RATE == perth_net.SAMPLE_RATE  # named twice only so that the marker imports no torch
