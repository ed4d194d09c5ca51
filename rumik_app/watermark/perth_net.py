"""PerthNet (implicit), Resemble AI's audio watermark network, ported from resemble-perth 1.0.1 (MIT).

The arithmetic of `perth.perth_net.perth_net_implicit` (model/, audio_processor.py, utils.py)
in plain torch functions over the shipped state dict, with `torch.stft`/`torch.istft` in place
of torchaudio's Spectrogram/InverseSpectrogram, so that neither perth nor torchaudio is
imported. rumik_app.watermark.marker is the interface (the weights, resampling, scores):

    from rumik_app.watermark.perth_net import load_weights, watermark_signal, decode_signal
    weights = load_weights(path)                  # torch.load(..., weights_only=True): tensors only
    marked = watermark_signal(weights, signal)    # float32 [N] at 32 kHz -> [N]
    score = decode_signal(weights, marked)        # the decoder's raw output (perth clips it to [0, 1])

Signal path (perth's, step for step): STFT (n_fft 2048, hop 320, the checkpoint's Hann window,
centred, reflect padding) -> magnitude in dB above 1e-9, scaled to about [0, 1] with 15 dB
headroom -> the encoder adds a residual to the lowest 128 bins (0-2 kHz) of frames louder than
5% of the loudest -> back to linear magnitude, the original phase, inverse STFT. The decoder
reads the same 128 bins at three time scales (x1.25, x1, x0.75), averages each branch over the
loud frames and weighs the three by a softmax of their attention outputs.

One deliberate difference: the inverse STFT is asked for the input's length, where perth's
returns a whole number of hops (up to 319 samples shorter). The samples both have are the same.
Tested against perth's own output by tests/evaluation/test_watermark.py.

What a marked sample depends on (rumik_app.watermark.stream marks a stream with it): the
frames whose 2048-sample windows cover it, the encoder's input at `encoder_reach` (15) frames
either side of those, and those frames' samples; plus one number for the whole clip, the
loudest frame's summed magnitude (`loudest`), against which a frame counts as loud.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from rumik_app.watermark import WatermarkUnavailable

SAMPLE_RATE = 32_000  # hparams.yaml of the shipped checkpoint
N_FFT = 2048
HOP = 320
MAG_MIN = 1e-9
HEADROOM_DB = 15.0
MIN_LEVEL_DB = 20 * math.log10(MAG_MIN)  # -180 dB
SUBBAND = round((N_FFT // 2 + 1) * 2000 / (SAMPLE_RATE / 2))  # bins below max_wmark_freq (2 kHz): 128
LOUD_FRAME = 0.05  # magmask: frames whose summed magnitude exceeds 5% of the loudest carry the mark
DECODER_SCALES = {"slow": 1.25, "normal": 1.0, "fast": 0.75}
WINDOW_KEY = "ap.spectrogram.window"
N_LAYERS = 7  # 1x1 in, five k=7 hidden, 1x1 out; LeakyReLU after all but the last

Weights = dict[str, torch.Tensor]


class WeightsError(WatermarkUnavailable):
    """The checkpoint file is missing, not a tensors-only checkpoint, or not PerthNet's."""


def _expected_keys() -> set[str]:
    stacks = ["encoder.layers", *(f"decoder.{name}_layers" for name in DECODER_SCALES)]
    return {f"{stack}.{i}.conv.{part}" for stack in stacks for i in range(N_LAYERS) for part in ("weight", "bias")}


def load_weights(path: str | Path, device: str | torch.device = "cpu") -> Weights:
    """PerthNet's tensors from `path`, loaded with weights_only=True (no pickled objects run):
    the conv stacks and the STFT window. WeightsError names the problem."""
    try:
        checkpoint = torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise WeightsError(f"{path}: no such file; reinstall the wheel: pip install resemble-perth==1.0.1") from exc
    except Exception as exc:  # pickle.UnpicklingError, RuntimeError (not a torch file), ...
        raise WeightsError(f"{path}: not a tensors-only PerthNet checkpoint ({exc}); reinstall "
                           "resemble-perth==1.0.1.") from exc
    state = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    keep = _expected_keys() | {WINDOW_KEY}
    missing = sorted(keep - set(state)) if isinstance(state, dict) else ["model"]
    if missing:
        raise WeightsError(f"{path}: not PerthNet's checkpoint (no {', '.join(missing[:3])}); reinstall "
                           "resemble-perth==1.0.1.")
    return {key: state[key].to(device=device, dtype=torch.float32) for key in keep}


# ---------------------------------------------------------------- STFT and magnitude (audio_processor, utils)


def signal_to_magphase(weights: Weights, signal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 [N] -> (normalised dB magnitude [1025, T], phase [1025, T]), T = 1 + N // 320."""
    window = weights[WINDOW_KEY]
    spec = torch.stft(signal, n_fft=N_FFT, hop_length=HOP, win_length=N_FFT, window=window, center=True,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    phase = torch.angle(spec)
    mag = 20 * torch.log10(spec.abs().clip(MAG_MIN))
    return (mag - MIN_LEVEL_DB) / (-MIN_LEVEL_DB + HEADROOM_DB), phase


def magphase_to_signal(weights: Weights, mag: torch.Tensor, phase: torch.Tensor, length: int) -> torch.Tensor:
    """The inverse of signal_to_magphase: float32 [length]."""
    mag = mag * (-MIN_LEVEL_DB + HEADROOM_DB) + MIN_LEVEL_DB
    mag = 10.0 ** ((mag / 20).clip(max=10))
    spec = mag * torch.exp(1.0j * phase)
    return torch.istft(spec, n_fft=N_FFT, hop_length=HOP, win_length=N_FFT, window=weights[WINDOW_KEY],
                       center=True, normalized=False, onesided=True, length=length)


# ---------------------------------------------------------------- the network (model/)


def _stack(weights: Weights, prefix: str, x: torch.Tensor) -> torch.Tensor:
    """perth's `Conv` layers of one nn.Sequential: Conv1d ('same' padding), LeakyReLU(0.01) but the last."""
    for i in range(N_LAYERS):
        weight, bias = weights[f"{prefix}.{i}.conv.weight"], weights[f"{prefix}.{i}.conv.bias"]
        x = F.conv1d(x, weight, bias, padding=(weight.shape[-1] - 1) // 2)
        if i < N_LAYERS - 1:
            x = F.leaky_relu(x)
    return x


def encoder_reach(weights: Weights) -> int:
    """Frames either side that one encoder output frame reads: (k - 1) / 2 summed over the convs (15)."""
    return sum((weights[f"encoder.layers.{i}.conv.weight"].shape[-1] - 1) // 2 for i in range(N_LAYERS))


def frame_totals(mag: torch.Tensor) -> torch.Tensor:
    """A frame's summed normalised magnitude, what "loud" is measured in: [..., F, T] -> [..., T]."""
    return mag.sum(dim=-2)


def loud_frames(mag: torch.Tensor, loudest: torch.Tensor | float | None = None) -> torch.Tensor:
    """magmask: [B, F, T] -> [B, T], 1.0 where a frame's summed magnitude exceeds 5% of the
    loudest frame's; `loudest`: that total when the clip is longer than `mag` (a stream's window)."""
    total = frame_totals(mag)
    top = total.max(dim=1).values[:, None] if loudest is None else loudest
    return (total > top * LOUD_FRAME).float()


def encode(weights: Weights, mag: torch.Tensor, loudest: torch.Tensor | float | None = None) -> torch.Tensor:
    """Encoder: [B, 1025, T] -> the same with the watermark residual added to the lowest SUBBAND bins
    of the loud frames (`loud_frames`; loudest: as there)."""
    mag = mag.clone()
    mask = loud_frames(mag, loudest)[:, None]
    mag[:, :SUBBAND] += _stack(weights, "encoder.layers", mag[:, :SUBBAND]) * mask
    return mag


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(dim=2) / mask.sum(dim=2)


def decode(weights: Weights, mag: torch.Tensor) -> torch.Tensor:
    """Decoder: [B, 1025, T] -> [B], near 1 for a watermarked magnitude, near 0 otherwise
    (NaN when no frame is loud, i.e. silence)."""
    mask = loud_frames(mag)[:, None]
    sub = mag[:, :SUBBAND]
    marks, attention = [], []
    for name, scale in DECODER_SCALES.items():
        x = sub if scale == 1.0 else F.interpolate(sub, size=int(sub.shape[2] * scale), mode="linear",
                                                   align_corners=True)
        out = _stack(weights, f"decoder.{name}_layers", x)
        branch_mask = F.interpolate(mask, size=out.shape[2], mode="nearest")
        attention.append(_masked_mean(out[:, :1], branch_mask))
        marks.append(_masked_mean(out[:, 1:], branch_mask))
    weight = F.softmax(torch.cat(attention, dim=1), dim=1)
    return (torch.cat(marks, dim=1) * weight).sum(dim=1)


# ---------------------------------------------------------------- whole signals (perth_watermarker.py)


@torch.inference_mode()
def watermark_signal(weights: Weights, signal: torch.Tensor) -> torch.Tensor:
    """float32 [N] at SAMPLE_RATE -> the watermarked float32 [N] (PerthImplicitWatermarker.apply_watermark)."""
    mag, phase = signal_to_magphase(weights, signal)
    return magphase_to_signal(weights, encode(weights, mag[None])[0], phase, length=signal.shape[0])


@torch.inference_mode()
def decode_signal(weights: Weights, signal: torch.Tensor) -> float:
    """The decoder's raw output for float32 [N] at SAMPLE_RATE (get_watermark before its clip and round)."""
    mag, _phase = signal_to_magphase(weights, signal)
    return float(decode(weights, mag[None])[0])
