"""Delivery formats and output rates (rumik_app.serve.encoding): G.711 checked against ffmpeg's
decoder, streamed pieces equal to the whole file byte for byte at every rate, AAC's rate and
length as ffmpeg decodes it, the output rate in every header, and the messages for bad values.

Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_encoding_rates.py
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf

from rumik_app.resample import RATES, resample
from rumik_app.serve.encoding import (
    AAC_FRAME,
    AAC_PRIMING,
    FORMATS,
    OPUS_RATES,
    encode_whole,
    format_problem,
    make_encoder,
    media_type,
    rate_problem,
    to_s16,
)

SR = 24_000
FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="ffmpeg is not installed (setup.sh installs it)")
FFMPEG_G711 = {"ulaw": "mulaw", "alaw": "alaw"}  # ffmpeg's demuxer names
MULAW_MAX = 8159 << 2  # the edge of mu-law's range in 16-bit units: above it the code saturates
CUTS = (0, 1, 333, 4_000, 4_001, 17_777)  # piece boundaries, at the source rate


def speechlike(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """float32 [N] at 24 kHz: a swept tone over six amplitude decades plus noise, and a clipped burst."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    envelope = np.logspace(-4, 0, t.size)  # 1e-4 .. 1: every G.711 segment
    wave = envelope * np.sin(2 * np.pi * (200 + 900 * t) * t) * 0.95 + rng.standard_normal(t.size) * 1e-3
    wave[-200:] = np.sign(wave[-200:]) * 1.2  # past full scale: clipped as the 16-bit pcm is
    return wave.astype(np.float32)


def streamed(fmt: str, wave: np.ndarray, rate: int | None, cuts=CUTS) -> bytes:
    """The bytes an encoder hands out piece by piece (the header, each piece, the end)."""
    encoder = make_encoder(fmt, SR, rate)
    bounds = [*cuts, wave.size]
    out = [encoder.header()] + [encoder.encode(wave[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    out.append(encoder.finish())
    encoder.close()
    return b"".join(out)


def ffmpeg_decode(data: bytes, *input_args: str) -> bytes:
    return subprocess.run([FFMPEG, "-v", "error", *input_args, "-i", "pipe:0", "-f", "s16le", "-ac", "1", "pipe:1"],
                          input=data, capture_output=True, check=True, timeout=60).stdout


def g711_half_step(fmt: str, pcm: np.ndarray) -> np.ndarray:
    """Half the G.711 quantisation step (16-bit units) at each sample's amplitude (ITU-T G.711):
    mu-law codes |x|/4 in 8 segments whose steps double, 8 * 2^seg with seg = floor(log2(|x|/4 + 33)) - 5;
    A-law codes |x|/8 with step 16 below 512, else |x|/16 rounded down to a power of two."""
    a = np.abs(pcm.astype(np.int64))
    if fmt == "ulaw":
        seg = np.clip(np.floor(np.log2(a // 4 + 33)) - 5, 0, 7)
    else:
        m = a // 8
        seg = np.where(m < 64, 1, np.floor(np.log2(np.maximum(m, 1))) - 4)
    return 8 * 2.0 ** seg / 2


# ---------------------------------------------------------------- G.711 against ffmpeg's decoder


@needs_ffmpeg
@pytest.mark.parametrize("fmt", ["ulaw", "alaw"])
def test_g711_decoded_by_ffmpeg_equals_our_8khz_pcm_within_quantisation(fmt):
    wave = speechlike()
    coded = encode_whole(fmt, wave, SR)  # 8 kHz: G.711's default rate
    pcm = np.frombuffer(encode_whole("pcm", wave, SR, 8_000), "<i2").astype(np.int64)
    assert len(coded) == pcm.size == round(wave.size * 8_000 / SR)  # one byte a sample, at 8 kHz
    decoded = np.frombuffer(ffmpeg_decode(coded, "-f", FFMPEG_G711[fmt], "-ar", "8000"), "<i2").astype(np.int64)
    assert decoded.size == pcm.size
    # The bound: half the G.711 step at that amplitude, measured from pcm clipped to the codec's range
    # (mu-law stops at +-32636; A-law covers 16 bits). Every sample meets it, and the mean error is a
    # quarter of a step, as uniform quantisation gives: the bound is not loose.
    edge = MULAW_MAX if fmt == "ulaw" else 32_768
    error = np.abs(decoded - np.clip(pcm, -edge, edge))
    half = g711_half_step(fmt, pcm)
    assert (error <= half).all(), (error - half).max()
    assert 0.2 < float(np.mean(error / (2 * half))) < 0.3
    assert np.corrcoef(decoded, pcm)[0, 1] > 0.999


@pytest.mark.parametrize("fmt", ["ulaw", "alaw"])
def test_g711_at_other_rates_codes_the_pcm_at_that_rate(fmt):
    wave = speechlike(0.5)
    for rate in (16_000, 48_000):
        coded = encode_whole(fmt, wave, SR, rate)
        pcm = np.frombuffer(encode_whole("pcm", wave, SR, rate), "<i2")
        buf = io.BytesIO(coded)
        raw, _ = sf.read(buf, dtype="int16", format="RAW", subtype=fmt.upper(), samplerate=rate, channels=1)
        assert raw.size == pcm.size == round(wave.size * rate / SR)


# ---------------------------------------------------------------- streamed == whole, at every rate


@pytest.mark.parametrize("rate", RATES)
def test_pcm_streamed_in_pieces_equals_the_whole_conversion_at_every_rate(rate):
    wave = speechlike(seed=rate)
    data = streamed("pcm", wave, rate)
    assert data == encode_whole("pcm", wave, SR, rate)
    assert data == to_s16(resample(wave, SR, rate)).tobytes()  # the one resampler, then libsndfile's 16 bits
    assert abs(len(data) // 2 - wave.size * rate / SR) <= 1


@pytest.mark.parametrize("fmt, rate", [("ulaw", None), ("alaw", None), ("ulaw", 16_000), ("wav", 22_050),
                                       ("mp3", 44_100), ("opus", 48_000), ("flac", 8_000),
                                       pytest.param("aac", None, marks=needs_ffmpeg),
                                       pytest.param("aac", 8_000, marks=needs_ffmpeg)])
def test_streamed_pieces_concatenate_to_the_whole_file(fmt, rate):
    wave = speechlike(1.0, seed=3)
    data = streamed(fmt, wave, rate)
    whole = encode_whole(fmt, wave, SR, rate)
    if fmt == "wav":  # streamed: sizes 0xFFFFFFFF; whole: the real ones; the samples are the same bytes
        assert data[44:] == whole[44:] and sf.info(io.BytesIO(whole)).samplerate == rate
    elif fmt == "opus":  # libsndfile pages the Ogg stream by its write calls: the same audio, other page bytes
        assert np.array_equal(sf.read(io.BytesIO(data))[0], sf.read(io.BytesIO(whole))[0])
    else:
        assert data == whole


def test_pcm_at_the_model_rate_is_unchanged():
    wave = speechlike(0.5)
    assert encode_whole("pcm", wave, SR) == to_s16(wave).tobytes() == encode_whole("pcm", wave, SR, SR)


# ---------------------------------------------------------------- headers carry the output rate


@pytest.mark.parametrize("fmt, rate", [("wav", 8_000), ("wav", 44_100), ("mp3", 16_000), ("mp3", 48_000),
                                       ("opus", 16_000), ("flac", 22_050)])
def test_file_headers_carry_the_output_rate(fmt, rate):
    wave = speechlike(1.0)
    audio, read_rate = sf.read(io.BytesIO(encode_whole(fmt, wave, SR, rate)), dtype="int16")
    assert read_rate == rate
    assert abs(audio.size - wave.size * rate / SR) < rate * 0.15  # mp3/opus: the codec's delay and padding


@needs_ffmpeg
@pytest.mark.parametrize("rate", [None, 8_000, 22_050, 44_100])
def test_aac_decodes_with_ffmpeg_to_the_right_rate_and_duration(rate):
    wave = speechlike(1.3)
    data = encode_whole("aac", wave, SR, rate)
    out_rate = rate or SR
    probe = subprocess.run([shutil.which("ffprobe") or "ffprobe", "-v", "error", "-show_entries",
                            "stream=codec_name,sample_rate,channels", "-of", "json", "pipe:0"], input=data,
                           capture_output=True, check=True, timeout=60).stdout
    stream = json.loads(probe)["streams"][0]
    assert (stream["codec_name"], int(stream["sample_rate"]), stream["channels"]) == ("aac", out_rate, 1)
    decoded = np.frombuffer(ffmpeg_decode(data, "-f", "aac"), "<i2")
    expected = round(wave.size * out_rate / SR)
    # ADTS carries no priming count: the decoder returns the encoder's delay (one frame) first, and the
    # last frame is padded: what remains is within one frame of the clip.
    assert 0 <= decoded.size - AAC_PRIMING - expected < AAC_FRAME, (decoded.size, expected)


@needs_ffmpeg
def test_an_aac_encoder_closed_early_stops_ffmpeg():
    encoder = make_encoder("aac", SR)
    assert encoder.proc is None  # nothing starts until audio comes
    encoder.encode(speechlike(0.5))
    proc = encoder.proc
    assert proc is not None and proc.poll() is None
    encoder.close()
    assert proc.poll() is not None
    encoder.close()  # idempotent


# ---------------------------------------------------------------- bad values: one sentence naming the fix


def test_unknown_rates_and_formats_are_refused_with_the_allowed_values():
    allowed = "8000, 16000, 22050, 24000, 44100, 48000"
    assert rate_problem("pcm", 11_025) == f"Unsupported sample_rate 11025. Choose one of: {allowed} (Hz)."
    assert rate_problem("wav", True) is not None and rate_problem("pcm", "16000") is not None
    assert all(rate_problem(fmt, rate) is None for fmt in FORMATS if fmt != "opus" for rate in (*RATES, None))
    assert "8000, 16000, 24000, 48000 Hz only" in rate_problem("opus", 22_050)
    assert all(rate_problem("opus", rate) is None for rate in OPUS_RATES)
    assert format_problem("wma") == f"Unsupported response_format 'wma'. Choose one of: {', '.join(FORMATS)}."
    assert format_problem("flac", ("pcm", "ulaw", "alaw")) == \
        "response_format 'flac' cannot be used here. Choose one of: pcm, ulaw, alaw."
    with pytest.raises(ValueError, match="Unsupported sample_rate 11025"):
        make_encoder("pcm", SR, 11_025)
    with pytest.raises(ValueError, match="unknown format 'wma'"):
        make_encoder("wma", SR)


def test_media_types_name_the_g711_rate():
    assert media_type("ulaw", 8_000) == "audio/PCMU;rate=8000" and media_type("alaw", 16_000) == "audio/PCMA;rate=16000"
    assert media_type("aac", 24_000) == "audio/aac" and media_type("pcm", 8_000) == "audio/pcm"
    assert make_encoder("ulaw", SR).sample_rate == 8_000 and make_encoder("aac", SR).sample_rate == SR


# ---------------------------------------------------------------- the CLI writes what the server sends


def test_the_cli_writes_g711_and_other_rates(tiny_checkpoint, tmp_path, capsys):
    from rumik_app import synthesize

    def run(name: str, *flags: str) -> bytes:
        out = tmp_path / name
        assert synthesize.main(["--model", str(tiny_checkpoint), "--text", "Hello there.", "--seed", "3",
                                "--max-seconds", "0.4", "--quiet", "--out", str(out), *flags]) == 0
        return out.read_bytes()

    model, rate = sf.read(io.BytesIO(run("a.wav")), dtype="int16")
    assert rate == SR
    ulaw = run("a.ulaw", "--format", "ulaw")
    pcm8 = np.frombuffer(run("a.pcm", "--format", "pcm", "--sample-rate", "8000"), "<i2").astype(np.int64)
    assert len(ulaw) == pcm8.size == round(model.size * 8_000 / SR)
    decoded, _ = sf.read(io.BytesIO(ulaw), dtype="int16", format="RAW", subtype="ULAW", samplerate=8_000, channels=1)
    error = np.abs(decoded.astype(np.int64) - np.clip(pcm8, -MULAW_MAX, MULAW_MAX))
    assert (error <= g711_half_step("ulaw", pcm8)).all()
    wide, wide_rate = sf.read(io.BytesIO(run("b.wav", "--sample-rate", "16000")), dtype="int16")
    assert wide_rate == 16_000 and abs(wide.size - model.size * 2 / 3) <= 1
    with pytest.raises(SystemExit) as info:
        synthesize.parse_args(["--text", "hi", "--out", "x.opus", "--format", "opus", "--sample-rate", "22050"])
    assert info.value.code == 2
    assert "--format 'opus' cannot use --sample-rate 22050" in capsys.readouterr().err
