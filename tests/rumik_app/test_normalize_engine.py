"""Normalisation wired into the request, the engine and the CLI (tiny checkpoint).

Run: .venv/bin/python -m pytest tests/rumik_app/test_normalize_engine.py -q
"""

from __future__ import annotations

import pytest

from rumik_app.prompt import MAX_TEXT_CHARS, PromptError
from rumik_app.request import SynthesisRequest

RAW = "₹2,50,000 15/08/2026 को दो <laugh>"
SPOKEN = "दो लाख पचास हज़ार रुपए पंद्रह अगस्त दो हज़ार छब्बीस को दो <laugh>"


def test_request_normalises_by_default_and_not_when_asked():
    assert SynthesisRequest(RAW).spoken_text() == SPOKEN
    assert SynthesisRequest(RAW, normalize=False).spoken_text() == RAW
    assert SPOKEN in SynthesisRequest(RAW, voice="Aisha").prompt()
    assert RAW in SynthesisRequest(RAW, normalize=False).prompt()


def test_request_language_and_errors():
    assert SynthesisRequest("उद्या 3 वाजता", language="mr").spoken_text() == "उद्या तीन वाजता"
    with pytest.raises(PromptError, match="Unknown language"):
        SynthesisRequest("5", language="klingon").spoken_text()
    with pytest.raises(PromptError, match="empty"):
        SynthesisRequest("  ").spoken_text()
    # The length limit applies to the text as typed, not to its longer spoken form.
    typed = ("₹1,23,456 " * (MAX_TEXT_CHARS // 10))[:MAX_TEXT_CHARS]
    assert len(SynthesisRequest(typed).prompt()) > MAX_TEXT_CHARS


def test_engine_prompt_carries_normalised_text_by_default(tiny_engine):
    normal = SynthesisRequest(RAW, seed=1)
    raw = normal.with_(normalize=False)
    assert tiny_engine.prompt_text(normal) == "[BOS]" + normal.prompt(voices=tiny_engine.voices)
    assert SPOKEN in tiny_engine.prompt_text(normal) and "₹" not in tiny_engine.prompt_text(normal)
    assert RAW in tiny_engine.prompt_text(raw)
    assert tiny_engine.prompt_ids(normal) != tiny_engine.prompt_ids(raw)
    ids = tiny_engine.tokenizer.encode(normal.prompt(voices=tiny_engine.voices), add_special_tokens=False)
    assert tiny_engine.prompt_ids(normal) == [tiny_engine.bos_id] + ids


def test_plan_chunks_the_spoken_text(tiny_engine):
    """Chunking and its duration estimates see the words, not the digits."""
    text = " ".join(f"वाक्य {i}: ₹{i},50,000 दिए।" for i in range(1, 40))
    plan = tiny_engine.plan(SynthesisRequest(text, seed=3, language="hi"))
    joined = " ".join(chunk.text for chunk in plan)
    assert "₹" not in joined and "रुपए" in joined and len(plan) > 1
    assert all(not chunk.normalize for chunk in plan)  # already spoken: not normalised twice
    raw_plan = tiny_engine.plan(SynthesisRequest(text, seed=3, language="hi", normalize=False))
    assert "₹" in raw_plan[0].text and len(raw_plan) < len(plan)


def test_generate_batch_uses_the_normalised_prompt(tiny_engine):
    req = SynthesisRequest("5 km", seed=2, max_new_tokens=16)
    rollouts = tiny_engine.generate_batch([req, req.with_(normalize=False)])
    assert rollouts.prompt_ids[0] == tiny_engine.prompt_ids(req)
    assert rollouts.prompt_ids[1] != rollouts.prompt_ids[0]


def test_cli_prints_the_spoken_text_and_no_normalize_sends_it_as_typed(tiny_checkpoint, tmp_path, capsys):
    from rumik_app.synthesize import main

    args = ["--model", str(tiny_checkpoint), "--text", "₹500 दो", "--seed", "1", "--max-seconds", "0.2"]
    assert main(args + ["--out", str(tmp_path / "a.wav")]) == 0
    assert "reading: पाँच सौ रुपए दो" in capsys.readouterr().out
    assert main(args + ["--no-normalize", "--out", str(tmp_path / "b.wav")]) == 0
    assert "reading:" not in capsys.readouterr().out
