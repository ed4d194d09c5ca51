"""`rumik synthesize --job DIR` (rumik_app.engine.resume): a long render interrupted and run again
continues from its first unfinished batch, and its audio equals one uninterrupted run's exactly.

Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_resume.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rumik_app.engine.resume import JobFolderError, render_in_folder, stored_seed
from rumik_app.request import SynthesisRequest
from rumik_app.serve.encoding import to_s16

ROOT = Path(__file__).resolve().parents[2]
# 6 planned chunks of ~16 s of expected speech (numbers read as words), each cut at its budget (tiny never stops)
TEXT = " ".join(f"This is sentence number {i} of a chapter that keeps on going." for i in range(18))


class Interrupted(Exception):
    """Stands for Ctrl-C or a crash in the middle of a render."""


@pytest.fixture
def small_batches(tiny_engine, monkeypatch):
    """The engine with batches of 2 chunks (so 6 chunks are 3 batches), its generate_batch counted."""
    monkeypatch.setattr(tiny_engine, "synth_batch_size", 2)
    calls = []
    real = tiny_engine.generate_batch

    def counted(requests, *args, **kwargs):
        calls.append(len(requests))
        if getattr(tiny_engine, "fail_at", None) == len(calls):
            raise Interrupted("interrupted")
        return real(requests, *args, **kwargs)

    monkeypatch.setattr(tiny_engine, "generate_batch", counted)
    yield tiny_engine, calls
    tiny_engine.__dict__.pop("fail_at", None)


def test_an_interrupted_render_resumes_from_its_first_unfinished_batch_and_equals_synthesize(small_batches, tmp_path):
    engine, calls = small_batches
    req = SynthesisRequest(TEXT, seed=5, max_new_tokens=50)
    assert len(engine.plan(req)) == 6
    engine.fail_at = 2
    with pytest.raises(Interrupted):
        render_in_folder(engine, req, tmp_path)
    assert sorted(path.name for path in tmp_path.glob("chunk_*.json")) == ["chunk_00000.json", "chunk_00001.json"]
    assert stored_seed(tmp_path) == 5
    engine.fail_at = None
    calls.clear()
    lines = []
    resumed = render_in_folder(engine, req, tmp_path, say=lines.append)
    assert calls == [2, 2] and resumed.info["resumed_chunks"] == 2 and "2 of 6 chunks" in lines[0]
    whole = engine.synthesize(req)
    assert np.array_equal(resumed.samples, whole.samples)  # the same rows batched together: the same samples
    assert resumed.info["finish_reasons"] == whole.info["finish_reasons"]


def test_a_damaged_chunk_is_made_again_and_another_request_is_refused(small_batches, tmp_path):
    engine, calls = small_batches
    req = SynthesisRequest(TEXT, seed=6, max_new_tokens=50)
    first = render_in_folder(engine, req, tmp_path)
    (tmp_path / "chunk_00003.f32").write_bytes(b"\0" * 16)  # a torn or damaged file
    calls.clear()
    again = render_in_folder(engine, req, tmp_path)
    assert calls == [2] and again.info["resumed_chunks"] == 4  # only chunk 3's batch (chunks 2 and 3)
    assert np.array_equal(again.samples, first.samples)
    with pytest.raises(JobFolderError, match="another request"):
        render_in_folder(engine, req.with_(seed=7), tmp_path)


@pytest.mark.slow
def test_the_cli_job_folder_resumes_with_its_seed_and_writes_the_same_wav(tiny_checkpoint, tiny_engine, tmp_path,
                                                                          capsys):
    """The first render in a fresh process, as typed; the rerun and the refusal through the same
    main(argv) in this process, which shares nothing with the first but the job folder."""
    from rumik_app.synthesize import main

    args = ["--model", str(tiny_checkpoint), "--text", TEXT, "--max-seconds", "0.5", "--job", str(tmp_path / "job")]
    first = subprocess.run([sys.executable, "-m", "rumik_app.synthesize", *args, "--seed", "3",
                            "--out", str(tmp_path / "a.wav")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert first.returncode == 0, first.stderr
    status = main([*args, "--out", str(tmp_path / "b.wav")])  # no --seed: the folder's
    again = capsys.readouterr()
    assert status == 0 and "resumed: 6 of 6 chunks" in again.out and "seed 3" in again.out
    a, b = sf.read(tmp_path / "a.wav", dtype="int16")[0], sf.read(tmp_path / "b.wav", dtype="int16")[0]
    whole = tiny_engine.synthesize(SynthesisRequest(TEXT, seed=3, max_new_tokens=50))
    assert np.array_equal(a, b) and np.array_equal(a, to_s16(whole.samples))  # as one in-process render
    status = main([*args, "--seed", "4", "--out", str(tmp_path / "c.wav")])
    err = capsys.readouterr().err
    assert status == 2 and "another request" in err and "Traceback" not in err
