"""Text normalisation in evaluation: spoken-form references in the runner and the Evaluate
tab's scoring, `--no-normalize`, systems that honour the request's switch, and the
digits-and-dates prompt set.

Run: .venv/bin/python -m pytest tests/evaluation/test_normalized_scoring.py -q
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import soundfile as sf

from evaluation import run as runner
from evaluation.systems import Synthesizer
from evaluation.text import normalize, spoken_form
from rumik_app.audio import Audio
from rumik_app.text.normalize import normalize_text

PROMPT_SET = Path(__file__).resolve().parents[2] / "evaluation" / "prompts" / "digits_dates.jsonl"
COVERED = {"as", "bn", "en", "gu", "hi", "kn", "ml", "mr", "or", "pa", "ta", "te", "ur"}


class RecordingSystem(Synthesizer):
    """Half a second of tone per clip; remembers the text each request asks to be read."""

    name = "recorder"
    label = "recording test system"

    def __init__(self) -> None:
        self.read: list[str] = []

    def _synthesize(self, request, *, clip_id, run):
        self.read.append(request.spoken_text())
        t = np.arange(12_000) / 24_000
        return Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 24_000, seed=request.seed)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


PROMPTS = [
    {"id": "m1", "text": "इसकी कीमत ₹500 है।", "language": "hi", "domain": "digits_money"},
    {"id": "m2", "text": "Meet me at 10:30 am.", "language": "en", "domain": "dates"},
]
# What an ASR judge might write: words for one, digits for the other.
HYPS = [{"id": "m1", "hyp": "इसकी कीमत पाँच सौ रुपए है"}, {"id": "m2", "hyp": "meet me at 10:30 AM"}]


def _run(tmp_path: Path, *extra: str) -> tuple[RecordingSystem, list[dict], str]:
    system = RecordingSystem()
    out = tmp_path / ("raw" if extra else "spoken")
    code = runner.main(["--prompts", str(_write(tmp_path / "p.jsonl", PROMPTS)), "--asr",
                        f"supplied:{_write(tmp_path / 'h.jsonl', HYPS)}", "--out", str(out), *extra], system=system)
    assert code == 0
    with open(out / runner.CLIPS_CSV, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return system, rows, (out / runner.REPORT).read_text(encoding="utf-8")


def test_runner_scores_spoken_references_and_says_so(tmp_path):
    system, rows, report = _run(tmp_path)
    assert system.read == ["इसकी कीमत पाँच सौ रुपए है।", "Meet me at ten thirty AM."]
    by_id = {r["id"]: r for r in rows}
    assert by_id["m1"]["ref"] == "इसकी कीमत ₹500 है।" and by_id["m1"]["ref_spoken"] == system.read[0]
    assert float(by_id["m1"]["wer"]) == 0.0 and float(by_id["m1"]["gcer"]) == 0.0
    assert float(by_id["m2"]["wer"]) == 0.0  # the transcript's digits are normalised too
    assert "compared in spoken form" in report and "rumik_app.normalize.normalize_text" in report
    manifest = [json.loads(line) for line in (tmp_path / "spoken" / runner.MANIFEST).read_text().splitlines()]
    assert all(rec["settings"]["normalize"] is True for rec in manifest)


def test_no_normalize_reads_and_scores_the_text_as_typed(tmp_path):
    system, rows, report = _run(tmp_path, "--no-normalize")
    assert system.read == [p["text"] for p in PROMPTS]
    by_id = {r["id"]: r for r in rows}
    assert float(by_id["m1"]["wer"]) > 0 and by_id["m1"]["ref_spoken"] == PROMPTS[0]["text"]
    assert "normalisation was off" in report


def test_evaluate_tab_scores_spoken_forms(tmp_path):
    from webapp.scoring import score_uploads

    clip = tmp_path / "a.wav"
    sf.write(clip, 0.3 * np.sin(np.arange(24_000) / 10), 24_000)
    report = score_uploads([str(clip)], references="इसकी कीमत ₹500 है।", transcripts="इसकी कीमत पाँच सौ रुपए है")
    assert report.clips[0].scores["wer"] == 0.0
    assert "spoken form" in report.markdown()


def test_spoken_form_is_the_engine_function():
    text = "₹2,50,000 on 15/08/2026"
    assert spoken_form(text) == normalize_text(text) == (
        "two lakh fifty thousand rupees on fifteenth August twenty twenty six")
    assert normalize(spoken_form("मुझे 5 मिनट दो", "hi")) == "मुझे पाँच मिनट दो"


def test_espeak_reads_the_normalised_text(monkeypatch):
    from evaluation.systems import espeak
    from rumik_app.request import SynthesisRequest

    spoken = []
    monkeypatch.setattr(espeak, "espeak_executable", lambda: "espeak-ng")
    monkeypatch.setattr(espeak, "espeak_synthesize",
                        lambda text, **kw: spoken.append(text) or Audio(np.zeros(10, np.float32)))
    system = espeak.EspeakSystem()
    system.synthesize(SynthesisRequest("₹5", seed=1))
    system.synthesize(SynthesisRequest("₹5", seed=1, normalize=False))
    assert spoken == ["five rupees", "₹5"]


def test_digits_and_dates_set_covers_the_13_languages_and_reads_without_digits():
    rows = [json.loads(line) for line in PROMPT_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = runner.load_prompts(PROMPT_SET)
    assert len(prompts) == len(rows) >= 4 * len(COVERED)
    assert {p["language"] for p in prompts} == COVERED
    assert set(Counter(p["domain"] for p in prompts)) == {"digits_money", "dates"}
    for lang in COVERED:
        assert {p["domain"] for p in prompts if p["language"] == lang} == {"digits_money", "dates"}, lang
    for p in prompts:
        assert re.search(r"\d", p["text"]), p["id"]  # every prompt exercises numbers
        spoken = normalize_text(p["text"], p["language"])
        assert not re.search(r"\d", spoken), (p["id"], spoken)
        assert not re.search(r"\b(?:AM|PM)\b", spoken) or p["language"] == "en", (p["id"], spoken)
