"""rumik_app: the one inference core for rumik-oss-1 (docs/ARCHITECTURE.md §1-§5).

    from rumik_app import TTSEngine, SynthesisRequest
    engine = TTSEngine.from_pretrained("rumik-ai/rumik-oss-1")   # or a local path, or "tiny"
    audio = engine.synthesize(SynthesisRequest("नमस्ते <laugh> दोस्तों", voice="Ira", tone="happy"))
    audio.samples  # float32 [N] at audio.sample_rate (24000)
    engine = load_engine("rumik-ai/rumik-oss-1", backend="vllm")   # the same API on vLLM (the vllm extra)

Heavy modules (torch, transformers) load on first use of the engine names, so the light
names (`SynthesisRequest`, the errors, `normalize_text`) and modules (`rumik_app.request`,
`.prompt`, `.text`, `.errors`, `.files`, `.cli_args`, `.serve.protocol`) import cheaply.
Subpackages by concern (docs/ARCHITECTURE.md §1): text, model, checkpoint, decode, engine, serve.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_LAZY = {
    "TTSEngine": "rumik_app.engine.local",
    "load_engine": "rumik_app.engine.loading",
    "SynthesisRequest": "rumik_app.request",
    "Audio": "rumik_app.audio",
    "Rollouts": "rumik_app.decode.rollouts",
    "RumikError": "rumik_app.errors",
    "CheckpointError": "rumik_app.errors",
    "PromptError": "rumik_app.errors",
    "normalize_text": "rumik_app.text.normalize",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover - the `X as X` aliases mark these as re-exports (listed in __all__)
    from rumik_app.audio import Audio as Audio
    from rumik_app.decode.rollouts import Rollouts as Rollouts
    from rumik_app.engine.loading import load_engine as load_engine
    from rumik_app.engine.local import TTSEngine as TTSEngine
    from rumik_app.errors import CheckpointError as CheckpointError
    from rumik_app.errors import PromptError as PromptError
    from rumik_app.errors import RumikError as RumikError
    from rumik_app.request import SynthesisRequest as SynthesisRequest
    from rumik_app.text.normalize import normalize_text as normalize_text


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rumik_app' has no attribute {name!r}")
