"""Voice packages and archives for tests: tiny adapters written with `write_package`, hostile zips.

    write_voice(library_dir, "Arjun", fingerprint)                     # 1 layer of 8x8 projections
    write_voice(library_dir, "Arjun", fingerprint, shapes=model_shapes(engine.model))   # voices.tiny's shapes
    write_voice(library_dir, "Arjun", base_fingerprint(ckpt), shapes=checkpoint_shapes(ckpt))   # no model loaded
    archive_of(folder)                                                 # the package's files as zip bytes
    zip_bytes({"voice.json": b"...", "adapter.bin": b"..."})           # any members, for hostile archives
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from rumik_app.voices.package import (
    TARGET_MODULES,
    LoraSpec,
    VoicePackage,
    base_shapes,
    consent_record,
    write_package,
)
from rumik_app.voices.tiny import random_adapter

SMALL_SHAPES = [{module: (8, 8) for module in TARGET_MODULES}]  # one layer: (in, out) per projection


def checkpoint_shapes(checkpoint_dir) -> list[dict]:
    """write_voice's shapes for an adapter that loads on the checkpoint: per layer, (in, out) per projection."""
    base = base_shapes(checkpoint_dir)
    return [{module: (inner, outer) for module, (outer, inner) in base.modules.items()}] * base.num_layers


def write_voice(library: Path, name: str, fingerprint: str, shapes=None, rank: int = 2, seed: int = 0,
                folder: str | None = None, **record) -> Path:
    """A package for voice `name` in `library/<folder or name>` (consent evidence: a .txt statement)."""
    spec = LoraSpec(rank=rank, alpha=2.0 * rank)
    tensors = random_adapter(shapes or SMALL_SHAPES, rank, seed, scale=0.01)
    evidence = library.parent / f"{name}-{seed}-consent.txt"
    statement = f"I, {name}, agree that my recorded voice may be used to synthesise speech in tests."
    evidence.write_text(statement)
    consent = consent_record(statement, evidence, document=True)
    package = VoicePackage(name, fingerprint, spec, consent, languages=("en", "hi"),
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
