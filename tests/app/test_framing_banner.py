"""The app on a checkpoint whose tokenizer disagrees with config.json: a banner, not a crash.

Run: .venv/bin/python -m pytest tests/app/test_framing_banner.py -q
"""

from __future__ import annotations

import json
import shutil

from webapp.systems import SYSTEM_RUMIK, SystemRegistry


def test_the_app_shows_the_framing_error_in_its_banner(tiny_checkpoint, tmp_path):
    swapped = tmp_path / "swapped"
    shutil.copytree(tiny_checkpoint, swapped)
    data = json.loads((swapped / "config.json").read_text())
    data["text_start_token_id"], data["audio_start_token_id"] = (data["audio_start_token_id"],
                                                                 data["text_start_token_id"])
    (swapped / "config.json").write_text(json.dumps(data))
    registry = SystemRegistry(model=str(swapped), device="cpu")
    status = registry.preload(SYSTEM_RUMIK)
    assert status.state == "failed" and "<audio>" in status.message and "config.json declares" in status.message
    banner = registry.banner_markdown()
    assert "could not be loaded" in banner and "audio_start_token_id" in banner and "still work" in banner
