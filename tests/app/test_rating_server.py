"""`python app.py` as a subprocess on a machine without the model: the banner, the tiny system,
and two raters rating at once while the server is SIGKILLed between submissions.

Every acknowledged rating must be in the database exactly once after the kill; a restarted
server continues; the export reaggregates to the numbers its results view shows.

Run: .venv/bin/python -m pytest tests/app/test_rating_server.py -q
"""

from __future__ import annotations

import json
import signal
import threading
import zipfile
from pathlib import Path

import pytest
import soundfile as sf
from gradio_client import Client
from gradio_client.exceptions import AppError

from evaluation import indicemo, nova
from evaluation.report import read_jsonl
from tests.app.conftest import free_port, start_app_process, wait_until_up
from webapp.ratings import RatingStore

pytestmark = pytest.mark.slow

PAIR_SECONDS = 0.5
PROMPTS = [("That was so funny <laugh> I cannot stop", "Happy"), ("मैं आज बहुत थक गई हूँ", "Sad"),
           ("We won the final <chuckle> unbelievable", "Excited")]
RATERS = ("asha", "ben")


class Server:
    def __init__(self, model: str, data_dir: Path, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = start_app_process(model, data_dir, self.port, log)
        wait_until_up(self.url, self.proc)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except Exception:  # noqa: BLE001
                self.kill()


def rate_prompts(client: Client, rater: str, prompts, acked: list[str], lock: threading.Lock) -> None:
    """Generate a pair per prompt (system tiny, seeds 1 and 2) and submit it twice (a double click)."""
    for k, (text, delivery) in enumerate(prompts):
        out = client.predict(text=text, prompt_id="", target_delivery=delivery, system_a="tiny", system_b="tiny",
                             seed_a=1, seed_b=2, max_seconds=PAIR_SECONDS, api_name="/generate_pair")
        trial = out[2]
        tagged = "<" in text
        kw = dict(heard_1="laugh" if k % 2 else "chuckle", where_1=k % 4, heard_2="none", where_2=None) if tagged \
            else dict(heard_1=None, where_1=None, heard_2=None, where_2=None)
        for attempt in range(2):
            msg = client.predict(rater=rater, trial_id=trial, score_1=1 + (k + len(rater)) % 5, score_2=5 - k % 3,
                                 preference="Clip 1" if k % 2 else "Clip 2", comment="", api_name="/submit_rating",
                                 **kw)
            if attempt == 0:
                assert msg.startswith("✓ Stored"), msg
                with lock:
                    acked.append(f"{trial}:{rater}")
            else:
                assert msg.startswith("Already stored"), msg


def run_raters(url: str, prompts, acked: list[str]) -> None:
    lock, errors = threading.Lock(), []
    barrier = threading.Barrier(len(RATERS))

    def work(rater: str) -> None:
        try:
            client = Client(url, verbose=False)
            barrier.wait(timeout=60)
            rate_prompts(client, rater, prompts, acked, lock)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(r,)) for r in RATERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a rater thread hung"


def test_offline_app_rates_concurrently_and_survives_sigkill(tmp_path):
    data = tmp_path / "data"
    missing = tmp_path / "not-downloaded"
    server = Server(str(missing), data, tmp_path / "server.log")
    acked: list[str] = []
    try:
        client = Client(server.url, verbose=False)
        banner = client.predict(api_name="/model_status")
        assert "could not be loaded" in banner and "--model tiny" in banner  # reason and fix, app still up
        with pytest.raises(AppError, match="No checkpoint folder"):
            client.predict(text="hello", system="rumik-oss-1", max_seconds=PAIR_SECONDS, api_name="/synthesize")
        wav = client.predict(text="hello", system="tiny", max_seconds=PAIR_SECONDS, seed=1, api_name="/synthesize")
        assert sf.info(wav).samplerate == 24_000

        run_raters(server.url, PROMPTS[:2], acked)
        server.kill()  # SIGKILL right after the last acknowledgement
        stored = RatingStore(data / "ratings.sqlite").submission_ids()
        assert stored == sorted(acked) and len(set(acked)) == len(acked) == 4
    finally:
        server.stop()

    server = Server(str(missing), data, tmp_path / "server2.log")
    try:
        run_raters(server.url, PROMPTS[2:], acked)
        store = RatingStore(data / "ratings.sqlite")
        assert store.submission_ids() == sorted(acked) and len(acked) == 6
        assert len(store.rows()) == 12  # two clips per submission
        client = Client(server.url, verbose=False)
        _, numbers = client.predict(api_name="/rating_results")
        files = client.predict(api_name="/export_ratings")
        bundle = next(Path(f) for f in files if f.endswith(".zip"))
        with zipfile.ZipFile(bundle) as zf:
            zf.extractall(tmp_path / "export")
        out = tmp_path / "export"
        emo = indicemo.aggregate(read_jsonl(out / "indicemo_judgments.jsonl"))
        assert {s.system: s.all_five for s in emo.systems} == {k: v["all_five"] for k, v in numbers["indicemo"].items()}
        assert len(emo.systems) == 2 and len(emo.judges) == 2
        prompts = read_jsonl(out / "nova_prompts.jsonl")
        manifest = json.loads((out / "manifest.json").read_text())
        listeners: dict[str, dict[str, list]] = {}
        for entry in manifest["nova_transcripts"]:
            lines = read_jsonl(out / entry["path"])
            ids = {x["id"] for x in lines}
            verdicts = nova.score_records([p for p in prompts if p["id"] in ids], lines)
            listeners.setdefault(entry["system"], {}).setdefault(entry["listener"], []).append(verdicts)
        assert set(listeners) == set(numbers["nova"])
        for system, by_listener in listeners.items():
            assert nova.aggregate(system, by_listener).score == pytest.approx(numbers["nova"][system]["score"])
    finally:
        server.stop()
    for log in ("server.log", "server2.log"):
        assert "Traceback" not in (tmp_path / log).read_text(), f"the server logged a traceback in {log}"
