"""The frozen Mimi codec: codes <-> 24 kHz audio, with an exact streaming decoder.

    codec = MimiCodec(mimi_model, num_quantizers=8)
    audio = codec.decode(codes)              # codes: [B, Q, T] -> float32 [B, T * 1920]
    codes = codec.encode(wave)               # wave: [B, N] at 24 kHz -> [B, Q, ceil(N / 1920)]
    dec = codec.streaming_decoder(batch=1)
    pieces = [dec.decode(codes[..., i:i + 4]) for i in range(0, T, 4)]   # cat(pieces) == decode(codes)

transformers' Mimi decodes whole sequences only. Its decoder is causal (causal convolutions,
transposed convolutions trimmed on the right, causal sliding-window attention), so streaming
is exact: each causal conv keeps the last `kernel - stride` inputs, each transposed conv
carries its overlapping tail to the next call, and the decoder transformer keeps a KV cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import DynamicCache
from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiConvTranspose1d, MimiResnetBlock


class _StreamingConv1d:
    """A causal MimiConv1d (stride 1) that keeps its left context between calls."""

    def __init__(self, layer: MimiConv1d, batch: int, device, dtype):
        if not layer.causal or layer.conv.stride[0] != 1 or layer.pad_mode != "constant":
            raise ValueError("streaming supports causal, stride-1, zero-padded convolutions only")
        self.layer = layer
        context = int(layer.padding_total)
        self.state = torch.zeros(batch, layer.conv.in_channels, context, device=device, dtype=dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.state, x], dim=-1)
        if self.state.shape[-1]:
            self.state = x[..., -self.state.shape[-1]:]
        return self.layer.conv(x)


class _StreamingConvTranspose1d:
    """A MimiConvTranspose1d (right-trimmed) that carries its overlapping tail forward."""

    def __init__(self, layer: MimiConvTranspose1d):
        if layer.padding_left != 0:
            raise ValueError("streaming needs trim_right_ratio == 1 (causal transposed convolutions)")
        self.conv: nn.ConvTranspose1d = layer.conv
        self.tail: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        y = F.conv_transpose1d(x, conv.weight, None, stride=conv.stride, groups=conv.groups)
        if self.tail is not None:
            overlap = self.tail.shape[-1]
            y = torch.cat([y[..., :overlap] + self.tail, y[..., overlap:]], dim=-1)
        keep = x.shape[-1] * conv.stride[0]
        self.tail = y[..., keep:]
        y = y[..., :keep]
        return y if conv.bias is None else y + conv.bias[None, :, None]


class StreamingDecoder:
    """Decode codes chunk by chunk; concatenated outputs equal one offline decode."""

    def __init__(self, mimi, batch: int = 1):
        # transformers 5.19's Mimi keeps its decoder parts flat on the model (5.20 nests them)
        upsample, transformer, seanet = mimi.upsample, mimi.decoder_transformer, mimi.decoder
        param = next(mimi.parameters())
        self.quantizer = mimi.quantizer
        self.upsample = _StreamingConvTranspose1d(upsample) if upsample is not None else None
        self.transformer = transformer
        self.cache = DynamicCache(config=self.transformer.config)
        self.seanet = [self._wrap(layer, batch, param.device, param.dtype) for layer in seanet.layers]

    def _wrap(self, layer, batch, device, dtype):
        if isinstance(layer, MimiConv1d):
            return _StreamingConv1d(layer, batch, device, dtype)
        if isinstance(layer, MimiConvTranspose1d):
            return _StreamingConvTranspose1d(layer)
        if isinstance(layer, MimiResnetBlock):
            if not isinstance(layer.shortcut, nn.Identity):
                raise ValueError("streaming supports identity shortcuts only (use_conv_shortcut=False)")
            block = [self._wrap(inner, batch, device, dtype) for inner in layer.block]
            return ("residual", block)
        return layer  # stateless: ELU

    @staticmethod
    def _run(stack, x: torch.Tensor) -> torch.Tensor:
        for layer in stack:
            if isinstance(layer, tuple):
                x = x + StreamingDecoder._run(layer[1], x)
            else:
                x = layer(x)
        return x

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, Q, t] (the next t frames) -> float32 audio [B, t * frame_size]."""
        latents = self.quantizer.decode(codes)
        if self.upsample is not None:
            latents = self.upsample(latents)
        hidden = self.transformer(latents.transpose(1, 2), use_cache=True, past_key_values=self.cache).last_hidden_state
        return self._run(self.seanet, hidden.transpose(1, 2))[:, 0].float()


class MimiCodec:
    """Mimi with this checkpoint's number of codebooks; all methods run without grad."""

    def __init__(self, mimi, num_quantizers: int):
        self.mimi = mimi.eval()
        self.num_quantizers = num_quantizers
        cfg = mimi.config
        self.sample_rate: int = int(cfg.sampling_rate)
        self.frame_rate: float = float(cfg.frame_rate)
        self.frame_size: int = int(round(self.sample_rate / self.frame_rate))

    @property
    def device(self) -> torch.device:
        return next(self.mimi.parameters()).device

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, Q, T] -> float32 audio [B, T * frame_size] (empty T gives [B, 0])."""
        codes = codes.to(self.device)
        if codes.shape[-1] == 0:
            return torch.zeros(codes.shape[0], 0, device=self.device)
        return self.mimi.decode(codes).audio_values[:, 0].float()

    @torch.no_grad()
    def encode(self, audio: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """audio: [B, N] float at `sample_rate` -> codes [B, Q, ceil(N / frame_size)] (long)."""
        audio = audio.to(self.device, torch.float32)
        mask = None if padding_mask is None else padding_mask.to(self.device)[:, None]
        out = self.mimi.encode(audio[:, None], padding_mask=mask, num_quantizers=self.num_quantizers)
        return out.audio_codes

    def streaming_decoder(self, batch: int = 1) -> StreamingDecoder:
        return StreamingDecoder(self.mimi, batch=batch)
