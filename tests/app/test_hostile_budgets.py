"""Hostile visitors, round 2: what one visitor's input may cost the app.

- Finding 3: an Evaluate manifest (CSV or JSONL) is streamed: memory stays flat whatever its
  size, rows, rows' and fields' sizes are capped with a message naming the limit, and a clip
  listed twice is scored once from its first row, which the summary says.
- Finding 8: before anything is decoded every clip's header is read, repeated uploads (the
  same path or the same bytes) are scored once, and a run whose distinct clips declare more
  than the budget is refused naming the clips and the limit, with nothing decoded.
- Finding 4: a generated A/B pair waits in the data dir's pending/ until it is rated; unrated
  pairs are bounded per client address and overall (the oldest go first, their trials with
  them), a rated pair's clips are archived as before, and rating a pruned pair says so.

Run: .venv/bin/python -m pytest tests/app/test_hostile_budgets.py -q
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import evaluation.audio_io
from tests.app.conftest import free_port, wait_until_up
from webapp import storage
from webapp.manifest import MAX_MANIFEST_FIELD_CHARS, MAX_MANIFEST_ROW_CHARS, MAX_MANIFEST_ROWS
from webapp.scoring import score_uploads
from webapp.storage import PendingClips, PendingQuota
from webapp.uploads import MAX_TOTAL_DECODE_SAMPLES, MAX_TOTAL_SECONDS

MANIFEST_ROWS = 45_000  # about 5 MB of CSV, the size that took the app up 512 MB
MANIFEST_PEAK_BOUND = 8 * 2**20  # rows are streamed: a few rows and two short clips, whatever the file's size
SHORT = 0.5


def traced(fn):
    """(what fn() returned or raised, the peak of traced allocations while it ran, in bytes)."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - the caller asserts on it
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two short espeak-ng English clips."""
    d = tmp_path_factory.mktemp("budget-clips")
    for name, text in (("hello.wav", "hello world"), ("later.wav", "see you later")):
        subprocess.run(["espeak-ng", "-w", str(d / name), text], check=True, timeout=60)
    return d


@pytest.fixture
def decodes(monkeypatch):
    """The clips `load_native` was asked to decode (the decoder every upload goes through)."""
    calls = []
    real = evaluation.audio_io.load_native

    def counting(path, *args, **kwargs):
        calls.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(evaluation.audio_io, "load_native", counting)
    return calls


# ---------------------------------------------------------------- 3. the manifest


def _manifest_rows(n: int):
    """n rows naming clips in a folder; rows 7 and n-3 are the two uploaded clips."""
    for k in range(n):
        name = {7: "hello.wav", n - 3: "later"}.get(k, f"clip{k:06d}.wav")
        text = {7: "hello world", n - 3: "see you later"}.get(k, f"reference text number {k} with a few words")
        yield {"file": f"tts/run-1/{name}", "text": text, "language": "en", "transcript": text}


def write_manifest(path: Path, rows) -> Path:
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, ["file", "text", "language", "transcript"])
            w.writeheader()
            w.writerows(rows)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_large_manifest_is_streamed_in_bounded_memory(clips, tmp_path, suffix):
    manifest = write_manifest(tmp_path / f"m{suffix}", _manifest_rows(MANIFEST_ROWS))
    size = manifest.stat().st_size
    assert size > 4_000_000
    files = [str(clips / "hello.wav"), str(clips / "later.wav")]
    report, peak = traced(lambda: score_uploads(files, manifest=str(manifest)))
    got = {c.file: c for c in report.clips}
    assert got["hello.wav"].scores["wer"] == 0.0 and got["later.wav"].reference == "see you later"
    assert got["later.wav"].language == "en" and "2 of 2 clip(s) scored" in report.markdown()
    assert peak < MANIFEST_PEAK_BOUND, f"{peak / 2**20:.1f} MiB for a {size / 1e6:.1f} MB manifest"


def _too_many_rows(path: Path) -> None:
    write_manifest(path, ({"file": f"c{k}.wav", "text": "x"} for k in range(MAX_MANIFEST_ROWS + 1)))


def _long_field(path: Path) -> None:
    write_manifest(path, [{"file": "hello.wav", "text": "x" * (MAX_MANIFEST_FIELD_CHARS + 1)}])


def _long_row(path: Path) -> None:  # a quoted CSV field of many short lines: one record, refused while read
    path.write_text("file,text\nhello.wav,\"" + "word\n" * (MAX_MANIFEST_ROW_CHARS // 5 + 10) + "\"\n")


def _long_jsonl_line(path: Path) -> None:
    path.write_text(json.dumps({"file": "hello.wav", "text": "x" * MAX_MANIFEST_ROW_CHARS}) + "\n")


def _wide_header(path: Path) -> None:
    path.write_text(",".join(f"column{k}" for k in range(5_000)) + "\n")  # 54,000 characters


def _not_utf8(path: Path) -> None:
    path.write_bytes("file,text\nhello.wav,caf\xe9\n".encode("latin-1"))


@pytest.mark.parametrize(("make", "suffix", "message"), [
    (_too_many_rows, ".csv", f"more than {MAX_MANIFEST_ROWS:,} rows"),
    (_too_many_rows, ".jsonl", f"more than {MAX_MANIFEST_ROWS:,} rows"),
    (_long_field, ".csv", f"the limit is {MAX_MANIFEST_FIELD_CHARS:,}"),
    (_long_field, ".jsonl", f"the limit is {MAX_MANIFEST_FIELD_CHARS:,}"),
    (_long_row, ".csv", f"over {MAX_MANIFEST_ROW_CHARS:,} characters"),
    (_long_jsonl_line, ".jsonl", f"over {MAX_MANIFEST_ROW_CHARS:,} characters"),
    (_wide_header, ".csv", "needs a `file` and a `text` column"),
    (_not_utf8, ".csv", "not UTF-8 text"),
])
def test_an_over_cap_manifest_gets_one_message_naming_the_limit(clips, tmp_path, make, suffix, message, decodes):
    manifest = tmp_path / f"bad{suffix}"
    make(manifest)
    with pytest.raises(ValueError, match=message) as err:
        score_uploads([str(clips / "hello.wav")], manifest=str(manifest))
    assert len(str(err.value)) < 600 and not decodes  # readable, and refused before any clip is decoded


def test_over_cap_manifest_over_http_is_the_message(client, clips, tmp_path):
    manifest = tmp_path / "rows.csv"
    _too_many_rows(manifest)
    with pytest.raises(AppError, match=f"more than {MAX_MANIFEST_ROWS:,} rows, the most one run reads"):
        client.predict(files=[handle_file(str(clips / "hello.wav"))], references="",
                       manifest=handle_file(str(manifest)), judge="pasted", transcripts="", language="en",
                       api_name="/evaluate")


def test_a_jsonl_manifest_works_over_http(client, clips, tmp_path):
    manifest = write_manifest(tmp_path / "refs.jsonl", [
        {"clip": "hello", "reference": "hello world", "hyp": "hello word"},
        {"FILE": "x/later.wav", "Text": "see you later", "transcript": "see you later"}])
    summary, table, _, _ = client.predict(
        files=[handle_file(str(clips / "hello.wav")), handle_file(str(clips / "later.wav"))], references="",
        manifest=handle_file(str(manifest)), judge="pasted", transcripts="", language="en", api_name="/evaluate")
    rows = {r[0]: r for r in table["data"]}
    assert rows["hello.wav"][4] == 0.5 and rows["later.wav"][4] == 0.0 and "2 of 2 clip(s) scored" in summary


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_clip_listed_twice_is_scored_once_from_its_first_row(clips, tmp_path, suffix):
    manifest = write_manifest(tmp_path / f"dup{suffix}", [
        {"file": "hello.wav", "text": "hello world", "transcript": "hello world"},
        {"file": "other/hello.wav", "text": "something else", "transcript": "no"},
        {"file": "hello", "text": "a third", "transcript": "no"}])
    report = score_uploads([str(clips / "hello.wav")], manifest=str(manifest))
    assert [c.file for c in report.clips] == ["hello.wav"] and report.clips[0].scores["wer"] == 0.0
    assert "The manifest lists `hello.wav` 3 times; its first row was used." in report.markdown()


# ---------------------------------------------------------------- 8. uploads' declared length


def long_flac(path: Path, variant: int = 0, rate: int = 192_000, seconds: int = 299, channels: int = 1) -> Path:
    """Finding 8's clip: 299 s at 192 kHz in ~190 KB of FLAC (a constant, not silent);
    `variant` changes one sample, so the bytes differ."""
    with sf.SoundFile(str(path), "w", samplerate=rate, channels=channels, format="FLAC", subtype="PCM_16") as f:
        block = np.full((rate * 13, channels), 100, dtype=np.int16)
        block[variant] = 1000 + variant
        for _ in range(seconds // 13):
            f.write(block)
        f.write(block[: rate * (seconds % 13)])
    return path


def test_twelve_long_clips_are_refused_before_anything_is_decoded(tmp_path, decodes):
    files = [str(long_flac(tmp_path / f"bomb{k:02d}.flac", k)) for k in range(12)]
    assert Path(files[0]).stat().st_size < 300_000
    refs = "\n".join(f"{Path(f).name} | hi" for f in files)
    err, peak = traced(lambda: score_uploads(files, refs, judge="pasted", transcripts=refs))
    assert isinstance(err, ValueError), err
    message = str(err)
    assert "hold 59.8 min of audio" in message and f"at most {MAX_TOTAL_SECONDS / 60:.0f} min" in message
    assert "`bomb00.flac` 299 s at 192 kHz, 1 channel(s)" in message and "and 7 more" in message
    assert decodes == [] and peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB"  # not one clip (one alone is ~230 MiB)


def test_refused_over_http_with_the_message_and_nothing_decoded(client, tmp_path, decodes):
    files = [long_flac(tmp_path / f"http{k:02d}.flac", k) for k in range(5)]
    with pytest.raises(AppError, match=r"hold 24\.9 min of audio by their headers; one run takes at most 20 min"):
        client.predict(files=[handle_file(str(f)) for f in files], references="", manifest=None, judge="pasted",
                       transcripts="", language="", api_name="/evaluate")
    assert decodes == []


def test_the_decoding_work_is_budgeted_too(tmp_path, decodes):
    """Four 290 s clips fit the 20 minutes, but at 192 kHz they are 4x the samples to decode."""
    files = [str(long_flac(tmp_path / f"hi{k}.flac", k, seconds=290)) for k in range(4)]
    with pytest.raises(ValueError, match="million samples to decode by their headers") as err:
        score_uploads(files, judge="pasted")
    assert f"at most {MAX_TOTAL_DECODE_SAMPLES / 1e6:,.0f} million" in str(err.value) and decodes == []


def test_the_same_clip_uploaded_twelve_times_is_decoded_once(tmp_path, decodes):
    clip = long_flac(tmp_path / "same.flac", rate=48_000, seconds=150)  # 12 x 150 s would be 30 min
    twin = shutil.copy(clip, tmp_path / "twin.flac")  # the same bytes under another name
    files = [str(clip)] * 12 + [str(twin)]
    refs = "same.flac | hi\ntwin.flac | hi"
    report = score_uploads(files, refs, judge="pasted", transcripts=refs)
    assert decodes == ["same.flac"]
    assert report.clips[0].scores and report.clips[0].file == "same.flac"
    repeats = report.clips[1:]
    assert len(repeats) == 12 and all(c.message.startswith("the same audio as `same.flac`") for c in repeats)
    assert "12 upload(s) repeat an earlier clip's file or bytes" in report.markdown()


# ---------------------------------------------------------------- 4. unrated pairs and the disk


def _request(address: str):
    return SimpleNamespace(client=SimpleNamespace(host=address), username=None)


def _pair_form(text: str = "A short pair."):
    from webapp.forms import PairForm

    return PairForm.from_inputs(text=text, prompt_id="", target_delivery="", system_a="espeak", system_b="espeak",
                                seed_a=1, seed_b=2, max_seconds=SHORT)


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture
def handlers(app_server, tmp_path):
    """Compare & rate handlers on the running app's systems, with their own data dir."""
    from webapp.access import AdminGate
    from webapp.rate_tab import RateHandlers
    from webapp.ratings import RatingStore
    from webapp.storage import DataLayout, ServedFolder
    from webapp.synth_tab import SynthHandlers

    layout = DataLayout(tmp_path / "data")
    synth = SynthHandlers(app_server[0].registry, ServedFolder(tmp_path / "served"))
    return RateHandlers(app_server[0].registry, synth, RatingStore(layout.database), layout, AdminGate())


def test_quotas_per_address_and_overall_drop_the_oldest_unrated_pairs(handlers):
    layout, pending, store = handlers.layout, handlers.pending, handlers.store
    first = handlers.generate_pair(_pair_form(), request=_request("10.0.0.1"))[2]
    pair_bytes = pending.usage("10.0.0.1")[0]
    assert pair_bytes > 0 and pending.is_pending(first)
    pending.quota = PendingQuota(client_bytes=int(2.5 * pair_bytes), client_pairs=100,
                                 total_bytes=int(3.5 * pair_bytes), total_pairs=100)
    a = [first] + [handlers.generate_pair(_pair_form(), request=_request("10.0.0.1"))[2] for _ in range(3)]
    assert pending.usage("10.0.0.1") == (2 * pair_bytes, 2)  # its two newest; the oldest went first
    assert [pending.is_pending(t) for t in a] == [False, False, True, True]
    assert store.get_trial(a[0]) is None and store.get_trial(a[3]) is not None  # the trial went with its clips
    b = [handlers.generate_pair(_pair_form(), request=_request("10.0.0.2"))[2] for _ in range(2)]
    # B's second pair passes the overall quota (3.5 pairs): the oldest of anyone's goes, A's.
    assert [pending.is_pending(t) for t in a[2:] + b] == [False, True, True, True]
    assert pending.usage() == (3 * pair_bytes, 3) and pending.usage("10.0.0.2") == (2 * pair_bytes, 2)
    assert _files_under(layout.rated_clips) == []  # nothing archived unrated
    assert sum(p.stat().st_size for p in _files_under(layout.pending_clips)) <= 3.5 * pair_bytes + 4096


def test_a_rated_pair_is_archived_and_a_pruned_one_says_it_expired(handlers):
    import gradio as gr

    from webapp.forms import RatingForm
    from webapp.rate_tab import PAIR_EXPIRED

    handlers.pending.quota = PendingQuota(client_pairs=1)
    old = handlers.generate_pair(_pair_form(), request=_request("10.0.0.3"))[2]
    new = handlers.generate_pair(_pair_form(), request=_request("10.0.0.3"))[2]
    rating = dict(rater="asha", score_1=3, score_2=4, preference="Clip 1")
    with pytest.raises(gr.Error) as err:
        handlers.submit(RatingForm(trial_id=old, **rating))
    assert err.value.message.endswith(PAIR_EXPIRED)
    with pytest.raises(gr.Error, match="Choose a preference"):  # the store refuses it before anything is archived
        handlers.submit(RatingForm(trial_id=new, **{**rating, "preference": "Clip 9"}))
    assert handlers.pending.is_pending(new) and not (handlers.layout.rated_clips / new).exists()
    assert handlers.submit(RatingForm(trial_id=new, **rating)).startswith("✓ Stored")
    trial = handlers.store.get_trial(new)
    for clip in trial.clips:  # archived where the database says, bytes as rated
        assert hashlib.sha256(Path(clip.audio_path).read_bytes()).hexdigest() == clip.audio_sha256
    assert Path(trial.clips[0].audio_path).parent == handlers.layout.rated_clips / new
    assert not (handlers.layout.pending_clips / new).exists()
    assert handlers.submit(RatingForm(trial_id=new, **rating)).startswith("Already stored")
    assert handlers.submit(RatingForm(trial_id=new, **{**rating, "rater": "ben"})).startswith("✓ Stored")


def test_an_ipv6_client_counts_as_its_slash_64(handlers):
    """A client that owns a /64 has 2**64 addresses: they share one quota (webapp.guard.address_key)."""
    handlers.pending.quota = PendingQuota(client_pairs=1)
    first = handlers.generate_pair(_pair_form(), request=_request("2001:db8:1:2::1"))[2]
    other = handlers.generate_pair(_pair_form(), request=_request("2001:db8:9:9::1"))[2]  # another /64
    handlers.generate_pair(_pair_form(), request=_request("2001:db8:1:2:ffff::7"))
    assert not handlers.pending.is_pending(first) and handlers.pending.is_pending(other)


def test_pending_pairs_survive_a_restart_and_age_out(tmp_path):
    clock = [1000.0]
    root = tmp_path / "pending"
    pending = PendingClips(root, PendingQuota(max_age_s=60), clock=lambda: clock[0])
    for trial in ("t1", "t2"):
        (pending.start(trial) / "clip-1.wav").write_bytes(b"x" * 100)
        clock[0] += 10
        pending.admit(trial, "10.0.0.1")
    pending.start("halfway")  # the app stopped while writing it
    again = PendingClips(root, PendingQuota(max_age_s=60), clock=lambda: clock[0])
    assert again.usage() == (200, 2) and not (root / "halfway").exists() and again.removed_on_start == ["halfway"]
    assert "10.0.0.1" not in "".join(p.read_text() for p in root.glob(f"*/{storage.PENDING_META}"))  # a hash only
    clock[0] += 55  # t1 is 65 s old, t2 55 s
    (again.start("t3") / "clip-1.wav").write_bytes(b"x")
    assert again.admit("t3", "10.0.0.9") == ["t1"] and again.usage() == (101, 2)
    with pytest.raises(ValueError, match="not a trial id"):
        again.start("../escape")


def test_generating_without_rating_does_not_grow_the_data_dir(tiny_checkpoint, tmp_path, monkeypatch):
    """Over HTTP, on a fresh app whose pending quota is three pairs per client: seven pairs and
    no rating leave clips/ empty and pending/ with the newest three; rating the newest archives
    it; rating the oldest is one message."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import app
    from webapp.access import AdminGate

    monkeypatch.setattr(storage, "DEFAULT_PENDING_QUOTA", PendingQuota(client_pairs=3))
    demo = app.build_demo(model=str(tiny_checkpoint), engine_options={"device": "cpu"}, data_dir=tmp_path / "data",
                          admin=AdminGate(), preload=False)
    port = free_port()
    _, url, _ = app.launch(demo, "127.0.0.1", port, prevent_thread_lock=True)
    try:
        wait_until_up(url)
        client = Client(url, verbose=False, download_files=False)
        layout = demo.data_layout
        trials, sizes = [], []
        for _ in range(7):
            out = client.predict(text="Nobody rates this.", prompt_id="", target_delivery="", system_a="espeak",
                                 system_b="espeak", seed_a=1, seed_b=2, max_seconds=SHORT, api_name="/generate_pair")
            trials.append(out[2])
            sizes.append(sum(p.stat().st_size for p in layout.pending_clips.rglob("*.wav")))
        assert _files_under(layout.rated_clips) == []
        assert sorted(p.name for p in layout.pending_clips.iterdir()) == sorted(trials[-3:])
        assert sizes[3:] == [sizes[2]] * 4  # full at three pairs: it grows no further
        assert [demo.rating_store.get_trial(t) is None for t in trials] == [True] * 4 + [False] * 3
        msg = client.predict(rater="asha", trial_id=trials[-1], score_1=4, score_2=2, preference="Clip 1",
                             comment="", api_name="/submit_rating")
        assert msg.startswith("✓ Stored")
        assert sorted(p.name for p in (layout.rated_clips / trials[-1]).iterdir()) == ["clip-1.wav", "clip-2.wav"]
        with pytest.raises(AppError, match="This pair expired before it was rated"):
            client.predict(rater="asha", trial_id=trials[0], score_1=4, score_2=2, preference="Clip 1", comment="",
                           api_name="/submit_rating")
    finally:
        demo.close()
