"""The framing check on the vLLM backend: a tokenizer that disagrees with config.json stops the
load before vLLM's engine starts (the engine backend's check: tests/rumik_app/test_framing.py)."""

from __future__ import annotations

import json
import shutil

import pytest


def test_vllm_refuses_a_checkpoint_whose_tokenizer_disagrees_with_its_config(tiny_checkpoint, tmp_path, monkeypatch):
    from rumik_app.engine.loading import load_engine
    from rumik_app.errors import CheckpointError
    from rumik_vllm import engine as vllm_engine

    swapped = tmp_path / "swapped"
    shutil.copytree(tiny_checkpoint, swapped)
    data = json.loads((swapped / "config.json").read_text())
    data["text_start_token_id"], data["audio_start_token_id"] = (data["audio_start_token_id"],
                                                                 data["text_start_token_id"])
    (swapped / "config.json").write_text(json.dumps(data))
    started = []
    monkeypatch.setattr(vllm_engine, "LoopThread", lambda *a, **k: started.append(a))
    with pytest.raises(CheckpointError, match="maps <audio> to id .* audio_start_token_id"):
        load_engine(str(swapped), backend="vllm", device="cpu")
    assert not started  # refused before vLLM's engine was started
