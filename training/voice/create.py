"""`rumik voice create`'s steps, cheap refusals first: name, consent, data, consent checks, model, training, package.

    summary = create_voice("Arjun", "recordings/arjun", "consent.wav", "I, Arjun Rao, consent to ...",
                           Path("voices"), load_config(VoiceConfig, None), work=Path("runs/voices/Arjun"))
    summary = run_smoke(Path("/tmp/voices"))        # training.voice.smoke's run; summary["verdict"]

Before anything loads, a bad name, a missing or unusable consent file, a voice that already
exists in VOICES_DIR, recordings without transcripts and without an ASR judge, and too much
audio are refused, each with its fix; too little usable audio, and a consent recording of another
speaker or of other words (training.voice.consent), are refused once the clips are cut, before the
model loads. Torch is imported only once the data is ready.
The run's config is saved as WORK/voice_config.json and in the package's voice.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from rumik_app.files import atomic_write
from rumik_app.voices.package import VoiceError, check_voice_name, consent_record
from training.config import config_dict, load_config, save_config
from training.voice.consent import document_verification, verify_consent
from training.voice.data import REPORT_FILE, MadeData, Recording, collect_clips, find_recordings, guess_language
from training.voice.progress import Progress
from training.voice.train_state import STATE_FILE
from training.voice.voice_config import VoiceConfig

CONFIG_FILE = "voice_config.json"
SUMMARY_FILE = "summary.json"
DATA_DONE = "data_done.json"  # the clips of WORK are these recordings' under these settings


def check_new_voice(name: str, voices_dir: Path) -> str:
    """The name, checked, and not yet a package (any case) in VOICES_DIR."""
    check_voice_name(name)
    if voices_dir.is_dir():
        taken = [p.name for p in voices_dir.iterdir() if p.name.lower() == name.lower()]
        if taken:
            raise VoiceError(f"{voices_dir / taken[0]} exists: delete it first (rumik voice delete {taken[0]} "
                             f"--voices {voices_dir}) or give the new voice another name.")
    return name


def load_judge(spec: str | None):
    """The ASR judge of `eval.asr` (evaluation.asr.load_asr), or None."""
    if not spec:
        return None
    from evaluation.asr import load_asr

    return load_asr(spec)


def create_voice(name: str, audio: str | Path, consent_file: str | Path, statement: str, voices_dir: Path,
                 cfg: VoiceConfig, work: Path, transcripts: str | Path | None = None,
                 consent_document: bool = False, progress: Progress | None = None) -> dict:
    """Make VOICES_DIR/NAME from recordings (module docstring); returns the run's summary
    (also WORK/summary.json): the package's path, its evaluation figures, the consent checks and
    the timings. `consent_file` is the speaker's recording of `statement`, or with
    `consent_document` a signed document (kept, not checked). `progress` gets each step's events
    and may cancel (training.voice.progress). Run again on the same WORK after a kill, it resumes:
    the clips are kept when the recordings and settings are the same, training goes on from
    WORK/train_state.pt."""
    start, progress = time.perf_counter(), progress or Progress()
    cfg.validate()
    check_new_voice(name, voices_dir)
    consent = consent_record(statement, consent_file, document=consent_document)
    recordings = find_recordings(audio, cfg.data.language, transcripts)
    work.mkdir(parents=True, exist_ok=True)
    save_config(cfg, work / CONFIG_FILE)
    root = Path(audio) if Path(audio).is_dir() else Path(audio).parent
    made = made_data(recordings, cfg, work, name, root, progress)
    progress.started("consent")
    checked = check_consent(Path(consent_file), consent.statement, cfg, made, work, consent_document)
    progress.done("consent", **checked)
    consent = dataclasses.replace(consent, verification=checked)
    data_seconds = time.perf_counter() - start
    from training.voice.voice_trainer import run

    trainer, figures, stages = run(cfg, name, made, work, progress)
    progress.started("package")
    path = trainer.write_package(voices_dir, consent, Path(consent_file), made, figures)
    (work / STATE_FILE).unlink(missing_ok=True)  # the run is finished: nothing to resume
    progress.done("package", package=str(path))
    summary = {"voice": name, "package": str(path), "checkpoint": str(trainer.checkpoint),
               "kept_minutes": made.report["kept_minutes"], "languages": list(made.languages),
               "evaluation": figures, "consent": checked,
               "seconds": {"data_s": round(data_seconds, 1), **stages},
               "total_seconds": round(time.perf_counter() - start, 1)}
    atomic_write(work / SUMMARY_FILE, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def data_key(recordings: list[Recording], cfg: VoiceConfig, name: str) -> str:
    """What WORK's clips were made from: the recordings (path, size, transcript, language), the name
    and the data settings, hashed."""
    rows = [[str(r.path), r.path.stat().st_size, r.text, r.language] for r in recordings]
    text = json.dumps([name, config_dict(cfg)["data"], cfg.eval.asr, rows], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def made_data(recordings: list[Recording], cfg: VoiceConfig, work: Path, name: str, root: Path,
              progress: Progress) -> MadeData:
    """The clips (training.voice.data.collect_clips), or those WORK already holds from the same
    recordings and settings (a resumed run)."""
    progress.started("data", recordings=len(recordings))
    key, marker = data_key(recordings, cfg, name), work / DATA_DONE
    done = json.loads(marker.read_text(encoding="utf-8")) if marker.exists() else {}
    if done.get("key") == key:
        report = json.loads((work / REPORT_FILE).read_text(encoding="utf-8"))
        made = MadeData(work / "train.jsonl", work / "heldout.jsonl", tuple(done["languages"]), report)
        progress.done("data", resumed=True, kept_minutes=report["kept_minutes"], dropped=report["dropped"])
        return made
    marker.unlink(missing_ok=True)
    made = collect_clips(recordings, cfg.data, work, name, load_judge(cfg.eval.asr), root=root)
    atomic_write(marker, json.dumps({"key": key, "languages": list(made.languages)}) + "\n")
    progress.done("data", kept_minutes=made.report["kept_minutes"], kept_clips=made.report["kept_clips"],
                  dropped=made.report["dropped"])
    return made


def check_consent(recording: Path, statement: str, cfg: VoiceConfig, made, work: Path, document: bool) -> dict:
    """The consent's verification record against the kept training clips (training.voice.consent);
    ConsentError when refused."""
    if document:
        return document_verification()
    rows = made.train_manifest.read_text(encoding="utf-8").splitlines()
    clips = [work / json.loads(row)["audio"] for row in rows]
    return verify_consent(recording, statement, clips, cfg, guess_language(statement, cfg.data.language))


def smoke_config(overrides: list[str], model: str | None, work: Path) -> VoiceConfig:
    """The smoke's VoiceConfig (training.voice.smoke.SMOKE_SETTINGS) under the user's --set."""
    from training.voice.smoke import smoke_overrides

    path = atomic_write(work / "smoke_settings.json", json.dumps(smoke_overrides(model), indent=2) + "\n")
    return load_config(VoiceConfig, path, overrides)


def run_smoke(voices_dir: Path, work: Path | None = None, overrides: list[str] | None = None,
              model: str | None = None, minutes: float | None = None) -> dict:
    """training.voice.smoke's run: recordings, the smoke base, create_voice, the verdict
    (summary["verdict"] is "PASS" or "FAIL", summary["criteria"] says why)."""
    from training.voice import smoke

    work = work or voices_dir.parent / f"{voices_dir.name}-smoke-work"
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    recordings = smoke.make_recordings(work / "recordings", minutes or smoke.SMOKE_MINUTES)
    consent = smoke.make_consent(work / "consent.wav")
    cfg = smoke_config(list(overrides or []), model, work)
    summary = create_voice(smoke.SMOKE_NAME, recordings, consent, smoke.STATEMENT, voices_dir, cfg,
                           work / smoke.SMOKE_NAME)
    passed, criteria = smoke.smoke_verdict(summary["evaluation"])
    summary.update(verdict="PASS" if passed else "FAIL", criteria=criteria, overrides=list(overrides or []),
                   smoke_seconds=round(time.perf_counter() - start, 1))
    atomic_write(work / "smoke_summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary
