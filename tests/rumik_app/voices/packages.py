"""Voice packages and archives for tests: tiny adapters written with `write_package`, hostile zips.

    write_voice(library_dir, "Arjun", fingerprint)                     # 1 layer of 8x8 projections
    write_voice(library_dir, "Arjun", fingerprint, shapes=model_shapes(engine.model))   # the model's own
    archive_of(folder)                                                 # the package's files as zip bytes
    zip_bytes({"voice.json": b"...", "adapter.bin": b"..."})           # any members, for hostile archives
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import torch

from rumik_app.voices.package import (
    TARGET_MODULES,
    LoraSpec,
    VoicePackage,
    adapter_key,
    consent_record,
    write_package,
)

SMALL_SHAPES = [{module: (8, 8) for module in TARGET_MODULES}]  # one layer: (in, out) per projection


def model_shapes(model) -> list[dict[str, tuple[int, int]]]:
    """(in, out) of every adapted projection of every layer of a loaded model."""
    from rumik_app.voices.lora import projection

    return [{module: (projection(layer, module).in_features, projection(layer, module).out_features)
             for module in TARGET_MODULES} for layer in model.model.layers]


def write_voice(library: Path, name: str, fingerprint: str, shapes=None, rank: int = 2, seed: int = 0,
                folder: str | None = None, **record) -> Path:
    """A package for voice `name` in `library/<folder or name>` (consent evidence: a .txt statement)."""
    generator = torch.Generator().manual_seed(seed)
    spec = LoraSpec(rank=rank, alpha=2.0 * rank)
    tensors = {}
    for index, layer in enumerate(shapes or SMALL_SHAPES):
        for module, (fan_in, fan_out) in layer.items():
            tensors[adapter_key(index, module, "A")] = torch.randn(rank, fan_in, generator=generator) * 0.01
            tensors[adapter_key(index, module, "B")] = torch.randn(fan_out, rank, generator=generator) * 0.01
    evidence = library.parent / f"{name}-{seed}-consent.txt"
    statement = f"I, {name}, agree that my recorded voice may be used to synthesise speech in tests."
    evidence.write_text(statement)
    package = VoicePackage(name, fingerprint, spec, consent_record(statement, evidence), languages=("en", "hi"),
                           data_hours=1.5, evaluation={"wer": 0.04}, created_at="2026-01-02T03:04:05+00:00",
                           **record)
    return write_package(library / (folder or name), package, tensors, evidence)


def archive_of(folder: Path, skip: tuple[str, ...] = ()) -> bytes:
    """The package folder's files at the top level of a zip."""
    return zip_bytes({path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.name not in skip})


def zip_bytes(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()
