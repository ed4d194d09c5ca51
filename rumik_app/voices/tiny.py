"""Random-weight voice packages in the exact format, for tests and benchmarks (as `checkpoint.tiny` is for models).

    folder = build_random_voice(voices_dir, model, "Arjun", checkpoint_dir, rank=8, seed=1)
    tensors = random_adapter(model_shapes(model), rank=4, seed=2)   # the adapter alone, PEFT's names

The adapter's A and B are Gaussian (std `scale`), so every adapted projection changes: the
voice's tokens differ from the base's, which is what tests of per-row LoRA need. The consent
record is a stand-in text, marked as such in its statement.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rumik_app.voices.lora import features, projection
from rumik_app.voices.package import (
    TARGET_MODULES,
    LoraSpec,
    VoicePackage,
    adapter_key,
    base_fingerprint,
    consent_record,
    write_package,
)


def model_shapes(model, modules: tuple[str, ...] = TARGET_MODULES) -> list[dict[str, tuple[int, int]]]:
    """(in, out) of every adapted projection of every layer of a loaded model."""
    return [{module: features(projection(layer, module)) for module in modules} for layer in model.model.layers]


def random_adapter(shapes: list[dict[str, tuple[int, int]]], rank: int, seed: int,
                   scale: float = 0.3) -> dict[str, torch.Tensor]:
    """PEFT-named LoRA matrices, per layer and projection of `shapes` ((in, out) each, as
    `model_shapes` gives): A [r, in], B [out, r], float32, Gaussian with std `scale`."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for index, layer in enumerate(shapes):
        for module, (in_features, out_features) in layer.items():
            tensors[adapter_key(index, module, "A")] = torch.randn(rank, in_features, generator=generator) * scale
            tensors[adapter_key(index, module, "B")] = torch.randn(out_features, rank, generator=generator) * scale
    return tensors


def build_random_voice(voices_dir: str | os.PathLike, model, name: str, checkpoint_dir: str | os.PathLike,
                       rank: int = 8, seed: int = 0, scale: float = 0.3) -> Path:
    """Write voice package `name` with a random adapter of `model` (made from `checkpoint_dir`)."""
    voices_dir = Path(voices_dir)
    voices_dir.mkdir(parents=True, exist_ok=True)
    evidence = voices_dir / f".{name}-consent.txt"
    evidence.write_text(f"Stand-in consent for the random test voice {name}; no person's voice is used.")
    package = VoicePackage(name, base_fingerprint(checkpoint_dir), LoraSpec(rank=rank, alpha=2.0 * rank),
                           consent_record(evidence.read_text(), evidence, document=True), languages=("en",),
                           training={"random": True, "seed": seed, "scale": scale})
    try:
        return write_package(voices_dir / name, package, random_adapter(model_shapes(model), rank, seed, scale),
                             evidence)
    finally:
        evidence.unlink(missing_ok=True)
