"""The app's Voice menu lists a voice library's voices (`rumik app --voices DIR`, docs/voices.md).

Run: .venv/bin/python -m pytest -n0 tests/app/test_voice_library.py -q
"""

from __future__ import annotations

from rumik_app.voices.package import base_fingerprint
from tests.rumik_app.voices.packages import checkpoint_shapes, write_voice
from webapp.main import parse_args
from webapp.synth_tab import SynthHandlers
from webapp.systems import SYSTEM_RUMIK, SystemRegistry


def test_the_voice_menu_follows_the_library(tiny_checkpoint, tmp_path):
    library = tmp_path / "voices"
    write_voice(library, "Arjun", base_fingerprint(tiny_checkpoint), shapes=checkpoint_shapes(tiny_checkpoint))
    assert parse_args(["--voices", str(library)]).voices == str(library)
    registry = SystemRegistry(model=str(tiny_checkpoint), voices=str(library), device="cpu")
    handlers = SynthHandlers(registry, served=None)
    assert handlers.voice_choices(SYSTEM_RUMIK)["choices"] == ["Ira", "Aisha", "Siya", "Zoya"]  # not loaded yet
    assert registry.preload(SYSTEM_RUMIK).state == "ready"
    assert registry.get(SYSTEM_RUMIK).voices == ("Ira", "Aisha", "Siya", "Zoya", "Arjun")
    write_voice(library, "Dev", base_fingerprint(tiny_checkpoint), shapes=checkpoint_shapes(tiny_checkpoint),
                seed=1)  # added while the app runs
    assert handlers.voice_choices(SYSTEM_RUMIK)["choices"][-2:] == ["Arjun", "Dev"]
    assert handlers.voice_choices("espeak")["choices"] == ["Ira", "Aisha", "Siya", "Zoya"]
