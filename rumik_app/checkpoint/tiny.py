"""Build a random-weight checkpoint in the exact published rumik-oss-1 format (docs/ARCHITECTURE.md §2).

    python -m rumik_app.tiny OUT_DIR                          # tiny: hidden 64, 2 layers (~1 MB)
    python -m rumik_app.tiny OUT_DIR --preset real-width --layers 4   # real width and vocabulary

Writes config.json (model_type rumik_oss, architectures, auto_map, every extra field, saved
the way transformers 4.57 saved the original), tokenizer.json + tokenizer_config.json
(byte-level BPE text vocabulary, then `<c_q>` unit tokens code-major at first_unit_id, then
`<text>`, `<audio>`, `</audio>`, then unused ids), model.safetensors in bf16 with tied
embeddings (no lm_head.weight) and `stop_predictor.{0,1,3}.*`, and codec/ with a small
transformers MimiModel (24 kHz, 12.5 Hz, legacy kyutai/mimi key layout) whose codebooks are
filled with random centroids (a fresh Mimi has all-zero codebooks, so everything decodes to
the same sound). No python files are written: the folder must load without remote code.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rumik_app.errors import ConfigError, user_errors
from rumik_app.model.tokens import unit_token_name

if TYPE_CHECKING:
    import torch

NUM_QUANTIZERS = 8
CODEBOOK_SIZE = 2048
FRAME_RATE_HZ = 12.5
NUM_UNUSED_IDS = 9  # the published vocabulary ends with 9 unused ids after </audio>
SPECIAL_TOKENS = ("<PAD>", "<UNK>", "<CLS>", "<SEP>", "<MASK_TOKEN>", "<BOS_TOKEN>", "<EOS_TOKEN>", "<EOP_TOKEN>")
BYTE_ALPHABET = 256  # byte-level BPE: one token per byte before any merges
PAD_ID, BOS_ID, EOS_ID = 0, 5, 6
# Mimi as published (kyutai/mimi): 32 quantizers in the file, the model uses the first 8.
MIMI_QUANTIZERS = 32


@dataclass
class TinySpec:
    """Shape of the random checkpoint. Defaults: tiny; `real_width()` gives the published width."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab_size: int = 512 + CODEBOOK_SIZE * NUM_QUANTIZERS + 3 + NUM_UNUSED_IDS
    logit_scale: float = 0.25
    rope_theta: float = 50_000.0
    sliding_window: int = 4096
    max_position_embeddings: int = 8192
    seed: int = 0

    @classmethod
    def real_width(cls, layers: int = 4) -> "TinySpec":
        return cls(hidden=2048, layers=layers, heads=16, kv_heads=4, ffn=11008, vocab_size=277_404, logit_scale=0.125)

    def validate(self) -> None:
        """ConfigError naming the field when this shape cannot make a Cohere2 model in the published format."""
        sizes = {"hidden": self.hidden, "layers": self.layers, "heads": self.heads, "kv_heads": self.kv_heads,
                 "ffn": self.ffn}
        if min(sizes.values()) < 1:
            raise ConfigError(f"every size must be >= 1, got {sizes}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ConfigError(f"--hidden ({self.hidden}) must be a multiple of --heads ({self.heads}), and --heads "
                              f"of --kv-heads ({self.kv_heads})")
        if self.first_unit_id < len(SPECIAL_TOKENS) + BYTE_ALPHABET:
            raise ConfigError(f"--vocab-size {self.vocab_size} leaves no room for the text tokens; use at least "
                              f"{self.vocab_size - self.first_unit_id + len(SPECIAL_TOKENS) + BYTE_ALPHABET}")

    @property
    def first_unit_id(self) -> int:
        return self.vocab_size - NUM_UNUSED_IDS - 3 - CODEBOOK_SIZE * NUM_QUANTIZERS


def layer_types(num_layers: int, pattern: int = 4) -> list[str]:
    """3 sliding-window layers, then 1 full-attention layer, repeated."""
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]


def config_dict(spec: TinySpec) -> dict:
    """config.json contents, laid out as transformers 4.57 saved the published file."""
    from rumik_app.model.config import ARCHITECTURE, AUTO_MAP, DEFAULT_SPEAKERS, MODEL_TYPE

    first = spec.first_unit_id
    last = first + CODEBOOK_SIZE * NUM_QUANTIZERS - 1
    return {
        "architectures": [ARCHITECTURE],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": dict(AUTO_MAP),
        "bos_token_id": BOS_ID,
        "cache_implementation": "hybrid",
        "eos_token_id": EOS_ID,
        "head_dim": spec.hidden // spec.heads,
        "hidden_act": "silu",
        "hidden_size": spec.hidden,
        "initializer_range": 0.02,
        "intermediate_size": spec.ffn,
        "layer_norm_eps": 1e-05,
        "layer_types": layer_types(spec.layers),
        "logit_scale": spec.logit_scale,
        "max_position_embeddings": spec.max_position_embeddings,
        "model_type": MODEL_TYPE,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "num_key_value_heads": spec.kv_heads,
        "order_of_interleaved_layers": "local_attn_first",
        "pad_token_id": PAD_ID,
        "position_embedding_type": "rope_gptj",
        "rope_scaling": None,
        "rope_theta": spec.rope_theta,
        "sliding_window": spec.sliding_window,
        "sliding_window_pattern": 4,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "use_embedding_sharing": True,
        "use_gated_activation": True,
        "use_parallel_block": True,
        "use_parallel_embedding": True,
        "vocab_size": spec.vocab_size,
        "first_unit_id": first,
        "last_unit_id": last,
        "num_quantizers": NUM_QUANTIZERS,
        "codebook_size": CODEBOOK_SIZE,
        "text_start_token_id": last + 1,
        "audio_start_token_id": last + 2,
        "audio_end_token_id": last + 3,
        "frame_rate_hz": FRAME_RATE_HZ,
        "speakers": list(DEFAULT_SPEAKERS),
    }


def _added(token_id: int, content: str, special: bool = True) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def tokenizer_dict(spec: TinySpec) -> dict:
    """A byte-level BPE tokenizer.json: any text encodes; audio tokens sit at config ids."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    first = spec.first_unit_id
    if len(vocab) > first:
        raise ValueError(f"vocab_size {spec.vocab_size} leaves no room for the byte alphabet")
    while len(vocab) < first:  # reserved text ids up to first_unit_id (never produced by BPE)
        vocab[f"<|reserved_{len(vocab)}|>"] = len(vocab)
    added = [_added(i, tok) for i, tok in enumerate(SPECIAL_TOKENS)]
    next_id = first
    for code in range(CODEBOOK_SIZE):
        for q in range(NUM_QUANTIZERS):
            added.append(_added(next_id, unit_token_name(code, q)))
            next_id += 1
    for tok in ("<text>", "<audio>", "</audio>"):
        added.append(_added(next_id, tok))
        next_id += 1
    for k in range(NUM_UNUSED_IDS):
        added.append(_added(next_id, f"<unused_audio_{k}>"))
        next_id += 1
    bos = SPECIAL_TOKENS[BOS_ID]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [BOS_ID], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def tokenizer_config_dict() -> dict:
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": "<UNK>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "CohereTokenizer",
    }


# kyutai/mimi's config.json where mimi_config_dict shrinks it (every other key is the same there): a
# random Mimi of the published size costs what the real one costs to run (benchmarks/prepare_throughput.py).
PUBLISHED_MIMI = {"hidden_size": 512, "num_filters": 64, "num_hidden_layers": 8, "intermediate_size": 2048,
                  "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64, "codebook_dim": 256,
                  "vector_quantization_hidden_dimension": 256, "upsample_groups": 512}


def mimi_config_dict(published: bool = False) -> dict:
    """A small Mimi with the real sample rate, frame rate and 32-quantizer layout (4.x keys); with
    `published`, the published size (PUBLISHED_MIMI, ~79 M parameters)."""
    hidden = 64
    return {**{
        "architectures": ["MimiModel"], "audio_channels": 1, "codebook_dim": 32, "codebook_size": CODEBOOK_SIZE,
        "compress": 2, "dilation_growth_rate": 2, "frame_rate": FRAME_RATE_HZ, "head_dim": 16,
        "hidden_act": "gelu", "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": 128,
        "kernel_size": 7, "last_kernel_size": 3, "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000, "model_type": "mimi", "norm_eps": 1e-05, "num_attention_heads": 4,
        "num_filters": 8, "num_hidden_layers": 2, "num_key_value_heads": 4, "num_quantizers": MIMI_QUANTIZERS,
        "num_residual_layers": 1, "num_semantic_quantizers": 1, "pad_mode": "constant",
        "residual_kernel_size": 3, "rope_theta": 10000.0, "sampling_rate": 24000, "sliding_window": 250,
        "torch_dtype": "float32", "transformers_version": "4.45.0.dev0", "trim_right_ratio": 1.0,
        "upsample_groups": hidden, "upsampling_ratios": [8, 6, 5, 4], "use_cache": False,
        "use_causal_conv": True, "use_conv_shortcut": False, "vector_quantization_hidden_dimension": 32,
    }, **(PUBLISHED_MIMI if published else {})}


PREPROCESSOR_CONFIG = {
    "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
    "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
    "sampling_rate": 24000,
}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_codec(out_dir: Path, seed: int, published: bool = False) -> None:
    """codec/: config.json, model.safetensors (legacy flat keys), preprocessor_config.json; a small
    Mimi, or with `published` one of the published size (both random)."""
    import torch
    from transformers import MimiConfig, MimiModel

    cfg = mimi_config_dict(published)
    torch.manual_seed(seed)
    model = MimiModel(MimiConfig(**{k: v for k, v in cfg.items()
                                    if k not in ("architectures", "transformers_version")}))
    generator = torch.Generator().manual_seed(seed + 1)
    for module in model.modules():  # random centroids: a fresh Mimi has all-zero codebooks
        if hasattr(module, "embed_sum") and hasattr(module, "cluster_usage"):
            module.embed_sum.copy_(torch.randn(module.embed_sum.shape, generator=generator))
            module.cluster_usage.fill_(1.0)
            module.initialized.fill_(1.0)
            module._embed = None
    _scale_output(model, generator)
    codec_dir = out_dir / "codec"
    model.save_pretrained(codec_dir)  # transformers writes the legacy kyutai/mimi key layout
    _write_json(codec_dir / "config.json", cfg)
    _write_json(codec_dir / "preprocessor_config.json", PREPROCESSOR_CONFIG)


TARGET_OUTPUT_STD = 0.1
TINY_STOP_BIAS = -20.0


def _scale_output(model, generator: torch.Generator) -> None:
    """Scale the last decoder conv so random codes decode to speech-like levels (std ~0.1)."""
    import torch

    with torch.no_grad():
        codes = torch.randint(0, CODEBOOK_SIZE, (1, NUM_QUANTIZERS, 25), generator=generator)
        std = float(model.decode(codes).audio_values.std())
        last_conv = model.decoder.layers[-1].conv  # the SEANet decoder (transformers 5.19's flat Mimi)
        last_conv.weight.mul_(TARGET_OUTPUT_STD / std)
        last_conv.bias.mul_(TARGET_OUTPUT_STD / std)


def build_weights(spec: TinySpec, cfg: dict, out_dir: Path) -> None:
    """model.safetensors: bf16, tied embeddings (no lm_head.weight), stop_predictor.{0,1,3}.*"""
    import torch
    from safetensors.torch import save_file

    from rumik_app.model.config import RumikOSSConfig
    from rumik_app.model.lm import RumikOSSForCausalLM

    torch.manual_seed(spec.seed)
    rcfg = RumikOSSConfig.from_dict(cfg)
    model = RumikOSSForCausalLM(rcfg.lm)
    with torch.no_grad():  # random LayerNorm weights (init leaves them at one)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(1.0, 0.1)
        # Random weights know nothing about length: make the stop head say "continue" so a
        # tiny model produces noise up to max_new_tokens (tests move this bias to test stops).
        model.stop_predictor[3].bias.fill_(TINY_STOP_BIAS)
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def build_tiny_checkpoint(out_dir: str | Path, spec: TinySpec | None = None) -> Path:
    """Write a random-weight checkpoint in the published format to `out_dir`; returns it."""
    spec = spec or TinySpec()
    spec.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_dict(spec)
    _write_json(out / "config.json", cfg)
    _write_json(out / "tokenizer.json", tokenizer_dict(spec))
    _write_json(out / "tokenizer_config.json", tokenizer_config_dict())
    _write_json(out / "special_tokens_map.json", {"bos_token": "<BOS_TOKEN>", "eos_token": "<EOS_TOKEN>",
                                                  "pad_token": "<PAD>", "unk_token": "<UNK>"})
    build_weights(spec, cfg, out)
    build_codec(out, spec.seed)
    _write_json(out / "tiny_spec.json", asdict(spec))  # records how it was made (ignored by the loader)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--preset", choices=("tiny", "real-width"), default="tiny")
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--ffn", type=int)
    parser.add_argument("--vocab-size", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    spec = TinySpec.real_width() if args.preset == "real-width" else TinySpec()
    for name in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab_size", "seed"):
        if getattr(args, name) is not None:
            setattr(spec, name, getattr(args, name))
    with user_errors(OSError):  # a bad shape or an unwritable OUT_DIR: one `error: ...` line, exit status 2
        out = build_tiny_checkpoint(args.out_dir, spec)
    print(f"wrote {out} ({spec.layers} layers, hidden {spec.hidden}, vocab {spec.vocab_size}, "
          f"first_unit_id {spec.first_unit_id})")


if __name__ == "__main__":
    main()
