"""The app through gradio_client on the tiny checkpoint: /synthesize, errors, streaming, preview.

Run: .venv/bin/python -m pytest tests/app/test_api.py -q
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import soundfile as sf
from gradio_client.exceptions import AppError

from rumik_app.prompt import VOICE_NOTE
from webapp.storage import without_random_chunk

SHORT = 0.5  # seconds of audio per request: enough to test, quick on 2 CPU cores


def _error(client, **kwargs) -> str:
    with pytest.raises(AppError) as info:
        client.predict(api_name="/synthesize", **{"max_seconds": SHORT, **kwargs})
    message = str(info.value)
    assert "Traceback" not in message and 'File "' not in message, message
    return message


def test_synthesize_returns_24khz_wav_and_seed_reproduces(client):
    a = client.predict(text="नमस्ते <laugh> दोस्तों", voice="Aisha", tone="happy", accent="Hindi", pace="fast",
                       seed=7, max_seconds=SHORT, api_name="/synthesize")
    info = sf.info(a)
    assert info.samplerate == 24_000 and info.channels == 1 and info.format == "WAV" and info.subtype == "PCM_16"
    assert info.frames > 0
    b = client.predict(text="नमस्ते <laugh> दोस्तों", voice="Aisha", tone="happy", accent="Hindi", pace="fast",
                       seed=7, max_seconds=SHORT, api_name="/synthesize")
    assert np.array_equal(sf.read(a)[0], sf.read(b)[0])


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"text": ""}, "Text is empty"),
        ({"text": "   "}, "Text is empty"),
        ({"text": "hello <giggle> there"}, "Unknown tag <giggle>. Allowed inline tags: <laugh>, <chuckle>, <sigh>"),
        ({"text": "x" * 2001}, "the limit is 2,000"),
        ({"text": "hi", "voice": "Rahul"}, "Unknown voice 'Rahul'"),
        ({"text": "hi", "tone": "sleepy"}, "Unknown tone 'sleepy'"),
        ({"text": "hi", "tone": "sad", "description": "calm"}, "not both"),
        ({"text": "hi", "system": "wavenet"}, "Unknown system 'wavenet'"),
        ({"text": "hi", "seed": -5}, "Use -1 for a random seed"),
    ],
)
def test_bad_input_is_one_readable_message(client, kwargs, expected):
    assert expected in _error(client, **kwargs)


def test_stream_yields_audio_before_the_end_and_reports_the_seed(client):
    job = client.submit(text="Streaming starts early.", seed=-1, max_seconds=2.0, api_name="/synthesize_stream")
    first_audio_at = None
    deadline = time.monotonic() + 120
    while not job.done() and time.monotonic() < deadline:
        outs = job.outputs()
        if first_audio_at is None and any(isinstance(o[0], str) for o in outs):
            first_audio_at = len(outs)
        time.sleep(0.02)
    assert job.done(), "streaming synthesis did not finish within 120 s"
    outs = job.outputs()
    pieces = [o for o in outs if isinstance(o[0], str)]
    assert len(pieces) >= 3, outs  # several pieces, not one file at the end
    assert first_audio_at is not None and first_audio_at < len(outs)
    final = outs[-1]
    seed_used, wav = final[1], final[2]
    assert seed_used.isdigit()  # -1 became a real seed, shown back (as text: an empty box before a run)
    seed_used = int(seed_used)
    assert sf.info(wav).samplerate == 24_000
    # The seed shown back reproduces the clip through the non-streaming endpoint.
    again = client.predict(text="Streaming starts early.", seed=seed_used, max_seconds=2.0, api_name="/synthesize")
    assert np.allclose(sf.read(wav)[0], sf.read(again)[0], atol=2 / 32768)


def test_prompt_preview_is_the_engine_prompt(client, app_server):
    from rumik_app.request import SynthesisRequest

    demo, _ = app_server
    prompt, _ = client.predict(text="hi <laugh> there", voice="Zoya", tone="sad", accent="Hindi", pace="slow",
                               description="ignored in this mode", description_mode="Tone, accent and pace",
                               system="rumik-oss-1", language="en", api_name="/prompt_preview")
    engine = demo.registry.get("rumik-oss-1").engine
    req = SynthesisRequest("hi <laugh> there", voice="Zoya", tone="sad", accent="Hindi", pace="slow")
    assert prompt == engine.prompt_text(req) == (
        '[BOS]<text>Zoya: <description="sad, Hindi accent, slow pace"> hi <laugh> there<audio>')
    free, _ = client.predict(text="नमस्ते", voice="Ira", tone="sad", accent="", pace="", description="warm and slow",
                             description_mode="Free-form description", system="rumik-oss-1", language="hi",
                             api_name="/prompt_preview")
    assert free == '[BOS]<text>Ira: <description="warm and slow"> नमस्ते<audio>'
    bad, _ = client.predict(text="hi <lol>", voice="Ira", tone="", accent="", pace="", description="",
                            description_mode="Tone, accent and pace", system="rumik-oss-1", language="en",
                            api_name="/prompt_preview")
    assert bad.startswith("⚠ Unknown tag <lol>")
    _, note = client.predict(text="வணக்கம்", voice="Ira", tone="", accent="", pace="", description="",
                             description_mode="Tone, accent and pace", system="rumik-oss-1", language="hi",
                             api_name="/prompt_preview")
    assert "Tamil script" in note


def test_tiny_gets_a_short_default_length(client):
    """Choosing tiny (random weights: noise until the cap) sets Max seconds to 3 s; other systems 20 s."""
    assert client.predict(system="tiny", api_name="/default_seconds") == 3.0
    assert client.predict(system="rumik-oss-1", api_name="/default_seconds") == 20.0
    assert client.predict(system="espeak", api_name="/default_seconds") == 20.0


def test_language_example_and_model_status(client):
    assert client.predict(language="te", api_name="/language_example").startswith("నమస్కారం")
    assert client.predict(api_name="/model_status") == ""  # the model loaded: no banner


def test_every_backend_event_has_an_api_name(app_server):
    demo, _ = app_server
    unnamed = [fn.name for fn in demo.fns.values() if fn.fn is not None and not fn.api_name]
    assert not unnamed
    api = demo.get_api_info()["named_endpoints"]
    def names(endpoint: str) -> list[str]:  # in order: gradio_client also passes arguments by position
        return [parameter["parameter_name"] for parameter in api[endpoint]["parameters"]]

    # Say it right appended its inputs, the lexicon editor's table last of all (it came after
    # the others): a caller passing arguments by position keeps every earlier place.
    assert names("/synthesize") == ["text", "voice", "tone", "accent", "pace", "description", "seed", "temperature",
                                    "top_k", "top_p", "max_seconds", "system", "normalize",
                                    "repetition_penalty",  # new settings come last:
                                    "lexicon", "dialogue", "dialogue_gap", "lexicon_entries"]
    assert names("/synthesize_stream") == ["text", "voice", "tone", "accent", "pace", "description", "seed",
                                           "temperature", "top_k", "top_p", "max_seconds", "system",
                                           "description_mode", "language", "normalize", "repetition_penalty",
                                           "lexicon", "dialogue", "dialogue_gap", "lexicon_entries"]
    assert names("/prompt_preview") == ["text", "voice", "tone", "accent", "pace", "description", "description_mode",
                                        "system", "language", "normalize", "lexicon", "dialogue", "dialogue_gap",
                                        "lexicon_entries"]
    side = ["system", "voice", "tone", "accent", "pace", "seed", "temperature", "label"]
    assert names("/generate_pair") == ["text", "prompt_id", "target_delivery", *(f"{n}_a" for n in side),
                                       *(f"{n}_b" for n in side), "max_seconds"]
    assert names("/submit_rating") == ["rater", "trial_id", "score_1", "score_2", "preference", "heard_1", "where_1",
                                       "heard_2", "where_2", "comment"]


def test_page_states_the_voice_note(app_server):
    import urllib.request

    with urllib.request.urlopen(app_server[1] + "config", timeout=10) as r:
        assert VOICE_NOTE in r.read().decode("utf-8")


def test_generated_pair_is_blind_and_hashes_match_the_served_audio(client, app_server):
    import hashlib
    from pathlib import Path

    out = client.predict(text="Blind <sigh> pair", prompt_id="", target_delivery="Sad", system_a="rumik-oss-1",
                         system_b="rumik-oss-1", seed_a=11, seed_b=12, max_seconds=SHORT, api_name="/generate_pair")
    clip1, clip2, trial_id, info = out[:4]
    names = (Path(clip1).name, Path(clip2).name)  # random tokens: nothing about A/B, systems, seeds or the trial
    assert all(re.fullmatch(r"[0-9a-f]{32}\.wav", n) for n in names) and names[0] != names[1], names
    assert "seed" not in info and "rumik" not in info
    trial = app_server[0].rating_store.get_trial(trial_id)
    assert {c.side for c in trial.clips} == {"A", "B"} and [c.label for c in trial.clips] == ["Clip 1", "Clip 2"]
    for served, clip in zip((clip1, clip2), trial.clips, strict=True):
        assert hashlib.sha256(without_random_chunk(Path(served).read_bytes())).hexdigest() == clip.audio_sha256
        assert clip.seed == (11 if clip.side == "A" else 12) and clip.settings["seed"] == clip.seed
    assert {c.system_id for c in trial.clips} == {"rumik-oss-1[rumik-oss-1-tiny] (seed 11)",
                                                  "rumik-oss-1[rumik-oss-1-tiny] (seed 12)"}
