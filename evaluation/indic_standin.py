"""A tiny stand-in for IndicConformer's `assets/` (tests and the judge speed benchmark), like
`rumik_app.checkpoint.tiny` for the TTS checkpoint: the same file names and graph I/O as
ai4bharat/indic-conformer-600m-multilingual, built on the fly with torch and exported to ONNX.

    from evaluation.indic_standin import build_standin
    folder = build_standin("/tmp/indic", {"hi": ["▁नम", "स्ते"]}, {"hi": [256, 1, 1, 256, 2]})
    judge = load_asr(f"indicconformer:{folder}")
    judge.transcribe(samples, 16000, "hi")     # "नमस्ते": the CTC path, whatever the audio says

- `encoder.onnx`: `audio_signal` [B, 80, T] + `length` [B] int64 -> `outputs` [B, D, T'] +
  `encoded_lengths` [B] int64, with NeMo's 8x subsampling (three stride-2 convolutions, so
  T' = ceil(T / 8)). Its outputs are a one-hot of the frame index (frame t lights channel t),
  so the CTC head can be told what to emit at every frame: a known CTC path.
- `ctc_decoder.onnx`: `encoder_output` [B, D, T'] -> `logprobs` [B, T', L x 256 + 1]
  (log_softmax of a 1x1 convolution); frame t scores each language's path token (and the
  shared blank on blank frames) highest.
- `vocab.json`: per language 257 pieces (`<unk>`, the given pieces, fillers); `language_masks.json`:
  per language its 256 contiguous ids and the blank, as the real file.
Library module, no command line; needs torch and onnx (torch.onnx.export).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evaluation.indicconformer import ASSETS, BLANK, CTC, ENCODER, MASKS, N_MELS, VOCAB
from rumik_app.files import atomic_write

TOKENS_PER_LANGUAGE = 256  # ids 0..255 of a language; id 256 is the shared blank
MAX_FRAMES = 192  # encoder channels = frames one window can light (192 x 80 ms = 15.4 s)
PATH_SCORE = 20.0  # logit of the path token; everything else scores 0
# The blank's logit at frames past a language's (shorter) path: below another language's path
# token at that frame, so each language still reads its own path after masking.
END_SCORE = PATH_SCORE / 2
OPSET = 17


def _modules(paths: dict[str, list[int]], languages: list[str]):
    import torch

    vocab_size = len(languages) * TOKENS_PER_LANGUAGE + 1

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            conv = [torch.nn.Conv1d(N_MELS if i == 0 else 8, 8, 3, 2, 1) for i in range(3)]
            self.subsample = torch.nn.Sequential(*conv)
            self.register_buffer("frames", torch.eye(MAX_FRAMES))

        def forward(self, audio_signal: torch.Tensor, length: torch.Tensor):
            hidden = self.subsample(audio_signal)  # [B, 8, T']: the real encoder's time axis
            n = hidden.shape[2]
            out = self.frames[None, :, :n].expand(hidden.shape[0], -1, -1) + 0.0 * hidden.sum()
            lengths = length
            for _ in range(3):  # NeMo's calc_length for kernel 3, stride 2, padding 1
                lengths = torch.div(lengths - 1, 2, rounding_mode="floor") + 1
            return out, lengths.to(torch.int64)

    class CTCHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(MAX_FRAMES, vocab_size, 1)
            weight = torch.zeros(vocab_size, MAX_FRAMES)
            blank = vocab_size - 1
            for k, lang in enumerate(languages):
                weight[blank, len(paths[lang]):] = torch.clamp(weight[blank, len(paths[lang]):], min=END_SCORE)
                for t, local in enumerate(paths[lang]):
                    weight[blank if local == BLANK else k * TOKENS_PER_LANGUAGE + local, t] = PATH_SCORE
            with torch.no_grad():
                self.conv.weight.copy_(weight[:, :, None])
                self.conv.bias.zero_()

        def forward(self, encoder_output: torch.Tensor) -> torch.Tensor:
            return torch.log_softmax(self.conv(encoder_output).transpose(1, 2), dim=-1)

    return Encoder().eval(), CTCHead().eval(), vocab_size


def build_standin(folder: str | os.PathLike, pieces: dict[str, list[str]], paths: dict[str, list[int]]) -> Path:
    """Write the stand-in to `folder` (returned); its `assets/` is what the judge reads.

    pieces: per language the pieces of local ids 1, 2, ... (id 0 is `<unk>`); paths: per
    language the local id emitted at each encoder frame (BLANK for the blank), at most MAX_FRAMES.
    """
    import torch

    languages = sorted(pieces)
    if sorted(paths) != languages or any(len(p) > MAX_FRAMES for p in paths.values()):
        raise ValueError(f"build_standin: one path per language, each at most {MAX_FRAMES} frames")
    assets = Path(folder) / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    encoder, ctc, vocab_size = _modules(paths, languages)
    kw = {"opset_version": OPSET, "dynamo": False}
    with torch.no_grad():
        torch.onnx.export(encoder, (torch.zeros(1, N_MELS, 101), torch.tensor([16_000], dtype=torch.int64)),
                          str(assets / ENCODER), input_names=["audio_signal", "length"],
                          output_names=["outputs", "encoded_lengths"],
                          dynamic_axes={"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"},
                                        "outputs": {0: "B", 2: "T_enc"}, "encoded_lengths": {0: "B"}}, **kw)
        torch.onnx.export(ctc, (torch.zeros(1, MAX_FRAMES, 13),), str(assets / CTC), input_names=["encoder_output"],
                          output_names=["logprobs"],
                          dynamic_axes={"encoder_output": {0: "B", 2: "T_enc"}, "logprobs": {0: "B", 1: "T_enc"}},
                          **kw)
    vocab, masks = {}, {}
    for k, lang in enumerate(languages):
        fill = [f"{lang}{j}" for j in range(len(pieces[lang]) + 1, TOKENS_PER_LANGUAGE)]
        vocab[lang] = ["<unk>", *pieces[lang], *fill, "<blank>"]  # 257, like the real file
        lo = k * TOKENS_PER_LANGUAGE
        masks[lang] = [lo <= i < lo + TOKENS_PER_LANGUAGE for i in range(vocab_size - 1)] + [True]
    atomic_write(assets / VOCAB, json.dumps(vocab, ensure_ascii=False))
    atomic_write(assets / MASKS, json.dumps(masks))
    atomic_write(Path(folder) / "config.json", json.dumps({"model_type": "iasr", "BLANK_ID": BLANK}))
    return Path(folder)
