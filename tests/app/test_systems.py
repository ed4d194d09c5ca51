"""System selector: a missing default model gives a banner with the fix; each model loads once.

The app-level check (python app.py without the model) is in test_rating_server.py.

Run: .venv/bin/python -m pytest tests/app/test_systems.py -q
"""

from __future__ import annotations

import threading

import pytest
import soundfile as sf

from webapp import systems
from webapp.systems import SYSTEM_ESPEAK, SYSTEM_RUMIK, SystemRegistry, SystemUnavailable


def test_offline_hub_model_fails_with_reason_and_fix():
    reg = SystemRegistry(model="rumik-ai/rumik-oss-1-not-cached", device="cpu")
    st = reg.preload(SYSTEM_RUMIK)
    assert st.state == "failed"
    assert "offline" in st.message and "--model tiny" in st.message and "hf download" in st.message
    banner = reg.banner_markdown()
    assert "could not be loaded" in banner and st.message in banner and "still work" in banner
    assert reg.default_choice() != SYSTEM_RUMIK
    assert dict((k, lbl) for lbl, k in reg.choices())[SYSTEM_RUMIK].endswith("(unavailable)")
    with pytest.raises(SystemUnavailable, match="offline"):
        reg.get(SYSTEM_RUMIK)


def test_a_model_loads_once_per_process_even_when_visitors_race(tiny_checkpoint, monkeypatch):
    calls = []
    real = systems._load_engine

    def counting(spec, **options):
        calls.append(spec)
        return real(spec, **options)

    monkeypatch.setattr(systems, "_load_engine", counting)
    reg = SystemRegistry(model=str(tiny_checkpoint), device="cpu", dtype="fp32")  # a cache entry of its own
    got = []
    threads = [threading.Thread(target=lambda: got.append(reg.get(SYSTEM_RUMIK))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == 4 and all(g is got[0] for g in got) and calls == [str(tiny_checkpoint)]
    assert SystemRegistry(model=str(tiny_checkpoint), device="cpu", dtype="fp32").get("rumik-oss-1") is got[0]


def test_unknown_system_names_the_choices():
    with pytest.raises(SystemUnavailable, match="Choose one of: rumik-oss-1, espeak, tiny"):
        SystemRegistry().resolve_key("wavenet")
    assert SystemRegistry().resolve_key("espeak-ng (classical baseline)") == SYSTEM_ESPEAK


def test_espeak_baseline_through_the_api(client):
    try:
        from evaluation.systems import load_system  # noqa: F401
    except ImportError:
        pytest.skip("evaluation.systems.load_system (the espeak-ng baseline) is not in this checkout yet")
    wav = client.predict(text="Hello from the classical baseline.", system=SYSTEM_ESPEAK, api_name="/synthesize")
    info = sf.info(wav)
    assert info.samplerate == 24_000 and info.frames > 24_000 // 4
