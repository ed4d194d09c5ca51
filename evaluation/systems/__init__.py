"""Systems the benchmark runner and the app can score, behind one `Synthesizer` interface.

    from evaluation.systems import load_system
    system = load_system("espeak")            # espeak-ng (classical baseline), offline
    system = load_system("rumik")             # rumik-oss-1 from the hub
    system = load_system("rumik:/ckpt/dir")   # a local checkpoint; "tiny" = tiny random one
    system = load_system("folder:clips/xtts") # pre-generated clips <dir>/<id>.wav
    system = load_system("openai:http://host:8000/v1;model=tts-1;voice=alloy;key_env=HOST_KEY")  # another server
    audio = system.synthesize(request, clip_id="p01", run=1)   # float32 [N] mono, 24 kHz

Not a CLI; tested by tests/evaluation/test_systems.py.
"""

from __future__ import annotations

from evaluation.systems.base import SynthesisError, Synthesizer, conform
from evaluation.systems.espeak import EspeakSystem, espeak_synthesize
from evaluation.systems.folder import FolderSystem
from evaluation.systems.remote import RemoteSpeechSystem
from evaluation.systems.rumik import RumikSystem
from rumik_app.request import DEFAULT_MODEL, TINY_MODEL

__all__ = ["Synthesizer", "SynthesisError", "RumikSystem", "FolderSystem", "RemoteSpeechSystem", "EspeakSystem",
           "espeak_synthesize", "load_system", "conform", "VALID_SPECS"]

VALID_SPECS = (
    f"rumik                    rumik-oss-1 from the hub ({DEFAULT_MODEL})",
    "rumik:PATH_OR_HUB_ID     a local checkpoint folder or another hub id in the same format",
    "tiny                     the tiny random checkpoint (tests, smoke runs)",
    "espeak                   espeak-ng, the classical offline baseline",
    "folder:DIR               pre-generated clips DIR/<id>.wav (or .flac/.ogg/.mp3)",
    "openai:URL;model=M;voice=V;key_env=VAR   another server's OpenAI speech API (evaluation/systems/remote.py)",
)


def load_system(spec: str, **engine_options) -> Synthesizer:
    """Build a system from a spec (see VALID_SPECS); SynthesisError listing them otherwise.
    engine_options (`load_engine`'s: device, dtype, compile, backend, ...; e.g. from
    `rumik_app.cli_args.engine_kwargs`) apply to rumik systems."""
    spec = (spec or "").strip()
    kind, sep, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "rumik" and not sep:
        return RumikSystem(DEFAULT_MODEL, **engine_options)
    if kind == "rumik" and arg:
        return RumikSystem(arg, **engine_options)
    if kind == TINY_MODEL and not sep:
        return RumikSystem(TINY_MODEL, **engine_options)
    if kind in ("espeak", "espeak-ng") and not sep:
        return EspeakSystem()
    if kind == "folder" and arg:
        return FolderSystem(arg)
    if kind == "openai" and arg:
        return RemoteSpeechSystem(spec)
    raise SynthesisError(f"Unknown system spec {spec!r}. Valid specs:\n  " + "\n  ".join(VALID_SPECS))
