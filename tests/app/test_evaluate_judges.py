"""The Evaluate tab's audio judges through the running app (gradio_client): DNSMOS OVRL/SIG/BAK
and speaker-similarity columns filled with the real judges' values on espeak-ng speech, their
means with bootstrap CIs in the summary and the CSV; an uploaded reference voice, else a
system's own voice; a too-long reference refused from its header; a judge that cannot load is
one message; and the app starts without importing the judges' heavy packages.

Run: .venv/bin/python -m pytest tests/app/test_evaluate_judges.py -q
"""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from evaluation.listening_stats import bootstrap_mean
from evaluation.quality import DNSMOS
from evaluation.speaker import ResemblyzerEncoder, cosine
from evaluation.systems import EspeakSystem
from evaluation.voice_ref import VoiceReferences
from tests.app.conftest import ROOT
from tests.evaluation.conftest import CLIPS, espeak_wav
from webapp.audio_judges import HEADERS, MAX_REFERENCE_SECONDS, UNAVAILABLE, AudioJudges, AudioRequest
from webapp.scoring import TABLE_HEADERS, score_uploads

AUDIO_HEADERS = [HEADERS[c] for c in ("dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak", "speaker_sim")]


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """tests/evaluation's espeak-ng clips (one voice on two sentences, another voice), as uploads."""
    folder = tmp_path_factory.mktemp("evaluate-judges")
    return {name: espeak_wav(folder / f"{name}.wav", voice, text) for name, (voice, text) in CLIPS.items()}


def table_by_file(table: dict) -> dict[str, dict]:
    return {row[0]: dict(zip(table["headers"], row, strict=True)) for row in table["data"]}


def evaluate(client, files, **audio):
    """/evaluate on `files` with pasted transcripts equal to their file names' stems."""
    names = [f.name for f in files]
    return client.predict(files=[handle_file(str(f)) for f in files],
                          references="\n".join(f"{n} | {n[:-4]}" for n in names), manifest=None, judge="pasted",
                          transcripts="\n".join(f"{n} | {n[:-4]}" for n in names), language="en",
                          api_name="/evaluate", **audio)


@pytest.mark.slow
def test_columns_hold_real_dnsmos_and_resemblyzer_values_with_an_uploaded_reference(client, speech):
    files = [speech["f5_two"], speech["m3_two"]]
    summary, table, _, csv_path = evaluate(client, files, quality=True, speaker=True,
                                           reference_clip=handle_file(str(speech["f5_one"])))
    assert table["headers"] == [*TABLE_HEADERS[:-1], *AUDIO_HEADERS, "message"]
    rows = table_by_file(table)
    dnsmos, encoder = DNSMOS(p808=False), ResemblyzerEncoder()
    ref = encoder.embed([speech["f5_one"]])[0]  # each file converted once, straight to the judge's rate
    with open(csv_path, newline="", encoding="utf-8") as f:
        full = {r["file"]: r for r in csv.DictReader(f)}  # every digit; the table rounds to 3
    for path in files:
        [q] = dnsmos.score([path])
        sim = cosine(ref, encoder.embed([path])[0])
        row = full[path.name]
        assert float(row["DNSMOS OVRL"]) == pytest.approx(q.ovrl, abs=1e-5) and 1 <= q.ovrl <= 5
        assert float(row["DNSMOS SIG"]) == pytest.approx(q.sig, abs=1e-5)
        assert float(row["DNSMOS BAK"]) == pytest.approx(q.bak, abs=1e-5)
        assert float(row["speaker sim"]) == pytest.approx(sim, abs=1e-5)
        assert rows[path.name]["DNSMOS OVRL"] == pytest.approx(q.ovrl, abs=1e-3) and rows[path.name]["WER"] == 0.0
    # The same voice on another sentence is closer to the reference than another voice.
    assert float(full["f5_two.wav"]["speaker sim"]) > float(full["m3_two.wav"]["speaker sim"])
    ovrl = bootstrap_mean([float(full[p.name]["DNSMOS OVRL"]) for p in files])
    assert f"DNSMOS OVRL {ovrl.text(3)}" in summary and "[95 % bootstrap CI over clips]" in summary
    assert "with clip f5_one.wav" in summary and "2 of 2 clip(s) scored" in summary


@pytest.mark.slow
def test_without_an_upload_the_systems_own_voice_is_the_reference(client, speech):
    _, table, _, csv_path = evaluate(client, [speech["f5_two"]], speaker=True, reference_system="espeak",
                                     reference_voice="Aisha")
    assert table["headers"] == [*TABLE_HEADERS[:-1], "speaker sim", "message"]  # no DNSMOS asked for
    encoder = ResemblyzerEncoder()
    ref = VoiceReferences(encoder, system=EspeakSystem()).get("Aisha")  # the app's cache ($RUMIK_CACHE)
    expected = cosine(ref, encoder.embed([speech["f5_two"]])[0])
    with open(csv_path, newline="", encoding="utf-8") as f:
        [row] = list(csv.DictReader(f))
    assert float(row["speaker sim"]) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(AppError, match="has no voice 'Nobody'; choose one of Ira"):
        evaluate(client, [speech["f5_two"]], speaker=True, reference_system="espeak", reference_voice="Nobody")


def test_a_too_long_reference_is_refused_from_its_header(client, speech, tmp_path):
    long_ref = tmp_path / "long.wav"
    t = np.arange(int((MAX_REFERENCE_SECONDS + 1) * 8000)) / 8000
    sf.write(long_ref, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 8000)
    with pytest.raises(AppError) as err:
        evaluate(client, [speech["f5_two"]], speaker=True, reference_clip=handle_file(str(long_ref)))
    message = str(err.value)
    assert message.startswith("The reference voice long.wav: unreadable: long.wav: the clip is")
    assert f"the limit here is {MAX_REFERENCE_SECONDS:g} s" in message and str(tmp_path) not in message
    assert "Traceback" not in message and "/tmp/gradio" not in message


def test_unchecked_judges_leave_the_table_as_it_was(client, speech):
    _, table, _, _ = evaluate(client, [speech["f5_two"]])
    assert table["headers"] == TABLE_HEADERS


def test_a_judge_that_cannot_load_is_one_message(speech, monkeypatch):
    import gradio as gr

    import evaluation.quality
    from webapp.evaluate_tab import EvaluateHandlers
    from webapp.scoring import JudgeCatalog

    def broken(*args, **kwargs):
        raise OSError("/opt/models/sig_bak_ovr.onnx: cannot open")

    monkeypatch.setattr(evaluation.quality, "DNSMOS", broken)
    runs = EvaluateHandlers(JudgeCatalog(), AudioJudges()).evaluate(
        [str(speech["f5_two"])], "f5_two", None, "pasted", "f5_two", "en", quality=True)
    assert next(runs)[0].startswith("Loading the audio judges")
    shown = next(runs)
    assert shown[0] == "⚠ Not scored: " + UNAVAILABLE.format(what="DNSMOS quality") and shown[1:] == (None,) * 3
    with pytest.raises(gr.Error) as err:
        next(runs)
    assert "/opt/models" not in err.value.message and "untick it" in err.value.message


def test_a_clip_the_judges_cannot_take_is_its_own_message(speech, monkeypatch):
    """A judge error on one clip (here the encoder's) is that clip's message; the others are judged."""
    from evaluation.speaker import SpeakerError

    judges = AudioJudges()
    encoder = judges.encoder()
    real = encoder.embed

    def picky(clips, rate=None):
        if clips[0].duration < 3:  # an Audio at the upload's own rate
            raise SpeakerError("clip 0: too short to embed (a stand-in failure).")
        return real(clips, rate)

    monkeypatch.setattr(encoder, "embed", picky)
    short = sf.read(speech["f5_one"])[0][: int(2.5 * 22050)]
    sf.write(speech["f5_one"].with_name("short.wav"), short, 22050)
    report = score_uploads([str(speech["f5_two"]), str(speech["f5_one"].with_name("short.wav"))], "a\nb", None,
                           "pasted", "a\nb", audio=AudioRequest(speaker=True, reference_clip=str(speech["f5_one"])),
                           audio_judges=judges)
    got = {c.file: c for c in report.clips}
    assert got["short.wav"].message == "audio judges: clip 0: too short to embed (a stand-in failure)."
    assert got["short.wav"].scores and not got["short.wav"].audio  # its WER still scored
    assert 0 < got["f5_two.wav"].audio["speaker_sim"] <= 1 and "(n=1)" in report.markdown()


def test_the_app_imports_no_judge_until_one_is_asked_for():
    code = ("import sys, app; from webapp.campaign.server import app as campaign_app; "
            "print(sorted(m for m in ('onnxruntime', 'resemblyzer', 'speechmos', 'webrtcvad') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
