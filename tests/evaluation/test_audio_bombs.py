"""Audio bombs: small files that decode to huge arrays are refused, with memory bounded.

A 40 KB WAV that declares 1 Hz decodes (and resamples) to ~1.9 GB; a FLAC of constant blocks
holds an hour in kilobytes, with or without its length in the header; a container only
ffmpeg reads can be just as long. `load_audio(max_seconds=...)` refuses each from its header
or stops decoding at the limit, and the peak of traced allocations stays small (numpy
reports its buffers to tracemalloc).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from evaluation.audio_io import MAX_CHANNELS, AudioLoadError, load_audio, load_native

LIMIT_S = 60.0
PEAK_BOUND = 64 * 2**20  # what a 60 s clip at 24 kHz can need, with room; the bombs would take GBs


def wav_header(rate: int, channels: int, data_bytes: int) -> bytes:
    """A PCM16 WAV header that declares `rate` and `channels` for `data_bytes` of samples."""
    block = 2 * channels
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, 16)
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", data_bytes))


def one_hertz_wav(path, kb: int = 40):
    """The measured bomb: 40 KB of samples at a declared 1 Hz (20,000 s)."""
    data = np.random.default_rng(0).integers(-3000, 3000, kb * 512, dtype=np.int16).tobytes()
    path.write_bytes(wav_header(1, 1, len(data)) + data)
    return path


def constant_flac(path, seconds: float, rate: int = 8000, declare_length: bool = True):
    """An hour of silence is a few KB of FLAC (constant subframes); optionally with the
    STREAMINFO total-samples field zeroed ("unknown"), as a hostile encoder may write it."""
    with sf.SoundFile(str(path), "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as f:
        block = np.zeros(rate * 10, dtype=np.int16)
        for _ in range(int(seconds / 10)):
            f.write(block)
    if not declare_length:
        data = bytearray(path.read_bytes())
        # fLaC, the metadata block header (4), then STREAMINFO: the 36-bit total-samples field
        # is the low 4 bits of byte 13 and bytes 14-17 of the block.
        start = 8
        data[start + 13] &= 0xF0
        data[start + 14:start + 18] = b"\0\0\0\0"
        path.write_bytes(bytes(data))
    return path


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_a_one_hertz_wav_is_refused_from_its_header_with_memory_bounded(tmp_path):
    bomb = one_hertz_wav(tmp_path / "bomb.wav")
    assert bomb.stat().st_size < 50_000
    assert _peak_while(lambda: pytest.raises(AudioLoadError, load_audio, bomb, max_seconds=LIMIT_S)) < PEAK_BOUND
    with pytest.raises(AudioLoadError, match="bomb.wav: the file declares a sample rate of 1 Hz; clips must be 8-192"):
        load_audio(bomb, max_seconds=LIMIT_S)


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "length-hidden"])
def test_a_flac_of_constant_blocks_is_refused_with_memory_bounded(tmp_path, declare_length):
    bomb = constant_flac(tmp_path / "hour.flac", 3600, declare_length=declare_length)
    assert bomb.stat().st_size < 200_000  # an hour of audio
    if not declare_length:  # the header no longer tells: only the decoder's own bound stops it
        assert sf.info(str(bomb)).frames != 3600 * 8000
    peak = _peak_while(lambda: pytest.raises(AudioLoadError, load_audio, bomb, max_seconds=LIMIT_S))
    assert peak < PEAK_BOUND, f"{peak / 2**20:.0f} MiB traced"
    with pytest.raises(AudioLoadError, match="limit here is 60 s"):
        load_audio(bomb, max_seconds=LIMIT_S)


def test_too_many_channels_are_refused_from_the_header(tmp_path):
    path = tmp_path / "many.wav"
    path.write_bytes(wav_header(24_000, MAX_CHANNELS + 1, 0) + b"")
    with pytest.raises(AudioLoadError, match="declares 9 channels"):
        load_audio(path, max_seconds=LIMIT_S)


def test_a_clip_within_the_limit_still_loads_and_many_channels_cost_one(tmp_path):
    rate = 48_000
    stereo = np.random.default_rng(1).uniform(-0.5, 0.5, (rate * 2, 8)).astype(np.float32)
    sf.write(tmp_path / "ok.wav", stereo, rate, subtype="FLOAT")
    samples = load_audio(tmp_path / "ok.wav", max_seconds=LIMIT_S)
    assert samples.shape == (24_000 * 2,) and samples.dtype == np.float32
    with pytest.raises(AudioLoadError, match="2.0 s or longer; the limit here is 1.5 s"):
        load_audio(tmp_path / "ok.wav", max_seconds=1.5)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed")
def test_ffmpeg_stops_at_the_limit_and_refuses_file_protocols_only(tmp_path):
    long_aac = tmp_path / "ten-minutes.m4a"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=8000", "-t", "600",
                    "-c:a", "aac", "-b:a", "16k", str(long_aac)], check=True)
    peak = _peak_while(lambda: pytest.raises(AudioLoadError, load_audio, long_aac, max_seconds=LIMIT_S))
    assert peak < PEAK_BOUND
    with pytest.raises(AudioLoadError, match="limit here is 60 s"):
        load_audio(long_aac, max_seconds=LIMIT_S)
    short = load_audio(long_aac, max_seconds=700)  # within the limit: decoded whole
    assert abs(len(short) / 24_000 - 600) < 1.0
    own = load_native(long_aac, max_seconds=700)  # ffmpeg decodes at the file's rate; soxr converts
    assert own.sample_rate == 8000 and abs(own.duration - 600) < 1.0
