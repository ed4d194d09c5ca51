"""`StreamWatermarker`: a stream of audio pieces marked as it goes, equal to marking the whole clip at once.

    marker = StreamWatermarker(shared_watermarker(), 24000)
    for piece in pieces:                       # float32 [n] at 24 kHz, any sizes
        send(marker.push(piece))               # the marked samples that are final now (may be empty)
    send(marker.finish())                      # the rest; concatenated: Watermarker.apply(whole clip)

`Watermarker.apply` is wave + down(perth(up) - up) (rumik_app.watermark.marker), and each part
streams exactly: soxr's `ResampleStream` gives the samples its one-shot `resample` gives, and
perth's residual is local. A marked sample at 32 kHz depends on the frames whose 2048-sample
windows cover it, on the encoder's input `encoder_reach` (15) frames of 320 samples either side
of those, and so on the input up to RIGHT = 2047 + 15 * 320 = 6847 samples ahead (214 ms) and
LEFT = 1023 + (15 + 4) * 320 = 7103 behind (4 frames of reflect padding at a window's edge). So
each step runs perth on a window [a, end) of the 32 kHz signal that starts LEFT before the first
sample not yet out (on a hop boundary: the frames are the whole clip's) and emits up to RIGHT
before its end; windows overlap, each sample is emitted once. The end of the stream is the
clip's end, where the window's reflect padding is the clip's.

One number is global: a frame carries the mark when its summed magnitude exceeds 5% of the
clip's loudest frame's. A stream knows only the loudest frame so far (up to RIGHT ahead), so a
frame above 5% of that but not of the clip's final loudest is marked here and not in the whole
clip. Such a frame's mean bin is below -168 dB (5% of the loudest possible frame of audio within
+-1: digital near-silence), and what the mark adds there is as faint: a second of noise at
1e-10 before a clip, marked in the stream and not in the whole clip, changed no sample by more
than float rounding. Everywhere else the stream equals `apply` to float rounding
(tests/rumik_app/test_watermark_stream.py: at most 1e-7 on the tiny checkpoint's audio in
uneven pieces, at 24, 32 and 22.05 kHz).

Latency: RIGHT at 32 kHz (214 ms) plus soxr's HQ stream delay up and down; measured at 24 kHz,
the output runs 255 ms behind the input (median), 281 ms at most; `latency_seconds()` bounds it
for 16 to 48 kHz (318 ms; at 32 kHz, no resampling: 214 ms exactly).
"""

from __future__ import annotations

import numpy as np
import torch

from rumik_app.watermark import WatermarkError, perth_net
from rumik_app.watermark.marker import MIN_SECONDS, PERTH_RATE, Watermarker, fit, resampler

HOP, HALF = perth_net.HOP, perth_net.N_FFT // 2
EDGE_FRAMES = -(-HALF // HOP)  # 4: frames whose window reaches past a window's start (reflect padding)
RESAMPLER_DELAY_S = 0.052  # soxr HQ's stream delay, each way: at most 52 ms at 16-48 kHz (measured)
_EMPTY = np.zeros(0, dtype=np.float32)


class _Perth32:
    """Perth's residual (marked - input) for a 32 kHz stream, emitted RIGHT samples behind its input."""

    def __init__(self, marker: Watermarker):
        self.marker = marker
        reach = perth_net.encoder_reach(marker.weights)
        self.right = 2 * HALF - 1 + reach * HOP  # 6847
        self.left = HALF - 1 + (reach + EDGE_FRAMES) * HOP  # 7103
        self.buffer = _EMPTY  # the signal from sample `origin` on
        self.origin = 0  # a multiple of HOP
        self.done = 0  # samples of residual emitted
        self.loudest = 0.0  # the loudest whole frame seen (perth_net.frame_totals)

    def push(self, up: np.ndarray, final: bool = False) -> np.ndarray:
        self.buffer = np.concatenate([self.buffer, up])
        total = self.origin + self.buffer.size
        end = total if final else total - self.right
        if end <= self.done:
            return _EMPTY
        start = max(0, (self.done - self.left) // HOP * HOP)
        residual = self._window(start, final)[self.done - start: end - start]
        self.done = end
        keep = max(0, (self.done - self.left) // HOP * HOP)  # the next window's start
        self.buffer, self.origin = self.buffer[keep - self.origin:], keep
        return residual

    @torch.inference_mode()
    def _window(self, start: int, final: bool) -> np.ndarray:
        """The residual over [start, end of the buffer), exact from LEFT after `start` to RIGHT before the end."""
        signal = self.buffer[start - self.origin:]
        weights = self.marker.weights
        mag, phase = perth_net.signal_to_magphase(weights, self.marker.tensor(signal))
        totals = perth_net.frame_totals(mag)
        first = 0 if start == 0 else EDGE_FRAMES  # whole frames: no reflect padding but the clip's own
        last = totals.shape[0] if final else (signal.size - HALF) // HOP + 1
        if last > first:
            self.loudest = max(self.loudest, float(totals[first:last].max()))
        encoded = perth_net.encode(weights, mag[None], loudest=self.loudest)[0]
        marked = perth_net.magphase_to_signal(weights, encoded, phase, length=signal.size)
        return marked.cpu().numpy() - signal


class StreamWatermarker:
    """One clip's watermark, piece by piece (see the module docstring); not thread-safe."""

    def __init__(self, marker: Watermarker, sample_rate: int):
        self.sample_rate = sample_rate
        self.up = resampler(sample_rate, PERTH_RATE)
        self.down = resampler(PERTH_RATE, sample_rate)
        self.perth = _Perth32(marker)
        self.dry = _EMPTY  # input not yet out
        self.wet = _EMPTY  # residual at `sample_rate` not yet out
        self.received = 0
        self.finished = False

    def latency_seconds(self) -> float:
        """At most how far behind its input the output runs (seconds of audio)."""
        return self.perth.right / PERTH_RATE + (2 * RESAMPLER_DELAY_S if self.up is not None else 0.0)

    def push(self, audio: np.ndarray) -> np.ndarray:
        """The next piece of the clip (float32 [n]); returns the marked samples now final."""
        if self.finished:
            raise RuntimeError("this stream has finished; start a new StreamWatermarker")
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or not np.isfinite(audio).all():
            raise WatermarkError("a stream piece must be mono float samples [n], finite")
        self.received += audio.size
        self.dry = np.concatenate([self.dry, audio])
        return self._step(audio, final=False)

    def finish(self) -> np.ndarray:
        """The end of the clip: the samples held back. WatermarkError when the whole clip was shorter
        than MIN_SECONDS (as `Watermarker.apply`); an empty clip stays empty."""
        self.finished = True
        if self.received == 0:
            return _EMPTY
        if self.received < MIN_SECONDS * self.sample_rate:
            raise WatermarkError(f"{self.received / self.sample_rate:.3f} s of audio is too short; the watermark "
                                 f"needs at least {MIN_SECONDS} s.")
        out = self._step(_EMPTY, final=True)
        return np.concatenate([out, self.dry + fit(self.wet, self.dry.size)])

    def _step(self, audio: np.ndarray, final: bool) -> np.ndarray:
        up = audio if self.up is None else self.up.push(audio, last=final)
        residual = self.perth.push(up, final)
        wet = residual if self.down is None else self.down.push(residual, last=final)
        self.wet = np.concatenate([self.wet, wet])
        ready = min(self.dry.size, self.wet.size)
        out = self.dry[:ready] + self.wet[:ready]
        self.dry, self.wet = self.dry[ready:], self.wet[ready:]
        return out
