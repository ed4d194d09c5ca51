"""The app's normalisation checkbox through gradio_client: the live prompt preview shows the
normalised text, unticked shows the text as typed, and /synthesize takes `normalize`.

Run: .venv/bin/python -m pytest tests/app/test_normalize_app.py -q
"""

from __future__ import annotations

import soundfile as sf

TEXT = "कल 3 बजे ₹500 लाना <laugh>"
PREVIEW = dict(voice="Ira", tone="", accent="", pace="", description="", description_mode="Tone, accent and pace",
               system="rumik-oss-1", language="hi")


def test_preview_shows_the_normalised_prompt_and_the_checkbox_turns_it_off(client, app_server):
    from rumik_app.request import SynthesisRequest

    demo, _ = app_server
    on, _ = client.predict(text=TEXT, normalize=True, api_name="/prompt_preview", **PREVIEW)
    off, _ = client.predict(text=TEXT, normalize=False, api_name="/prompt_preview", **PREVIEW)
    assert on == "[BOS]<text>Ira: कल तीन बजे पाँच सौ रुपए लाना <laugh><audio>"
    assert off == f"[BOS]<text>Ira: {TEXT}<audio>"
    engine = demo.registry.get("rumik-oss-1").engine
    assert on == engine.prompt_text(SynthesisRequest(TEXT, language="hi"))
    default, _ = client.predict(text=TEXT, api_name="/prompt_preview", **PREVIEW)  # the box starts ticked
    assert default == on


def test_synthesize_api_accepts_normalize(client):
    path = client.predict(text="₹5", seed=1, max_seconds=0.5, normalize=False, api_name="/synthesize")
    assert sf.info(path).samplerate == 24_000
