"""Every command line reports a user error as one `error: ...` line and exit status 2, no traceback.

One bad argument per entry point (a bad config key or override, a missing file, a bad
shape), run in process through each `main`; `python -m training.grpo --set nosuch=1` also as
a real subprocess, the way the issue saw it fail.
"""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rumik_app.errors import EXIT_USER_ERROR, ConfigError, PromptError, RumikError

ROOT = Path(__file__).resolve().parents[1]


def _cases(tmp: Path) -> dict[str, list[str]]:
    missing = str(tmp / "missing.jsonl")
    return {
        "rumik_app.synthesize": ["--model", str(tmp / "no-model"), "--text", "hi", "--out", str(tmp / "x.wav")],
        "rumik_app.tiny": [str(tmp / "t"), "--hidden", "65"],
        "evaluation.run": ["--system", "espeak", "--prompts", missing, "--asr", "pocketsphinx",
                           "--out", str(tmp / "r")],
        "evaluation.asr": [str(tmp / "missing.wav")],
        "evaluation.align": [str(tmp / "missing.wav"), "--text", "hi", "--language", "en",
                             "--out", str(tmp / "w.json")],
        "evaluation.quality": [str(tmp / "missing.wav"), "--out", str(tmp / "q.jsonl")],
        "evaluation.speaker": [str(tmp / "missing.wav"), str(tmp / "b.wav"), "--out", str(tmp / "s.jsonl")],
        "evaluation.nova": ["score", "--prompts", missing, "--transcripts", missing, "--out", str(tmp / "v.jsonl")],
        "evaluation.indicemo": ["aggregate", "--judgments", missing],
        "training.prepare": ["--manifest", missing, "--model", "tiny", "--out", str(tmp / "data")],
        "training.sft": ["--config", str(tmp / "missing.toml")],
        "training.grpo": ["--smoke", "--out", str(tmp / "g"), "--set", "nosuch=1"],
        "webapp.campaign": ["status", "--name", "nosuch", "--data-dir", str(tmp / "app")],
        "rumik_app.serve": ["--model", str(tmp / "no-model")],
    }


MAIN_MODULE = {"training.sft": "training.sft.__main__", "training.grpo": "training.grpo.__main__",  # packages
               "webapp.campaign": "webapp.campaign.cli", "rumik_app.serve": "rumik_app.serve.__main__"}


def _module_main(name: str):
    return importlib.import_module(MAIN_MODULE.get(name, name)).main


@pytest.mark.parametrize("entry", list(_cases(Path("/x"))))
def test_user_error_is_one_line_and_status_2(entry, tmp_path, capsys):
    argv = _cases(tmp_path)[entry]
    try:
        code = _module_main(entry)(argv)
    except SystemExit as stop:
        code = stop.code
    assert code == EXIT_USER_ERROR, entry
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "Traceback" not in "\n".join(err)
    assert len([line for line in err if line.startswith("error: ")]) == 1 and err[-1].startswith("error: "), err


def test_a_missing_model_names_the_fix_in_each_commands_own_terms(tmp_path, capsys):
    """The same missing checkpoint, worded for the flags of the command that hit it."""
    from evaluation.run import main as run_main
    from rumik_app.synthesize import main as synth_main
    from training.grpo.__main__ import main as grpo_main

    missing = str(tmp_path / "no-model")
    prompts = ROOT / "evaluation" / "prompts" / "intelligibility_en.jsonl"
    runs = {
        "--model /path/to/rumik-oss-1": lambda: synth_main(["--model", missing, "--text", "hi", "--out",
                                                            str(tmp_path / "x.wav")]),
        "--system rumik:/path/to/rumik-oss-1": lambda: run_main(["--system", f"rumik:{missing}", "--prompts",
                                                                  str(prompts), "--asr", "pocketsphinx", "--out",
                                                                  str(tmp_path / "r")]),
        "--set model=/path/to/rumik-oss-1": lambda: grpo_main(["--smoke", "--out", str(tmp_path / "g"), "--set",
                                                                f"model={missing}"]),
    }
    for fix, run in runs.items():
        try:
            code = run()
        except SystemExit as stop:
            code = stop.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == EXIT_USER_ERROR and len(err) == 1, (fix, err)
        assert err[0].startswith(f"error: No checkpoint folder at {missing}.") and fix in err[0], err[0]


@pytest.mark.slow  # a fresh interpreter importing torch: ~10 s
def test_grpo_unknown_key_from_the_shell(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "training.grpo", "--smoke", "--out", str(tmp_path / "g"),
                           "--set", "nosuch=1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == EXIT_USER_ERROR
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert proc.stderr.startswith("error: Unknown config key(s) 'nosuch'. Valid keys: ")


def test_one_base_class_over_every_error_type():
    from evaluation.asr_judge import ASRError
    from evaluation.audio_io import AudioLoadError
    from evaluation.prompt_file import PromptFileError
    from evaluation.quality import QualityError
    from evaluation.speaker import SpeakerError
    from evaluation.systems import SynthesisError
    from rumik_app.errors import CheckpointConfigError, CheckpointError
    from training.prepare import PrepareError
    from training.sft.data import DataError
    from webapp.access import AccessDenied, LoginError
    from webapp.campaign.data.conditions import DesignError
    from webapp.campaign.data.definition import CampaignError
    from webapp.campaign.data.raters import RaterError
    from webapp.campaign.data.store import NotYourItem
    from webapp.common import UserError
    from webapp.ratings import RatingError
    from webapp.storage import UnsafeLayoutError
    from webapp.systems import SystemUnavailable

    everything = (CheckpointError, CheckpointConfigError, PromptError, ConfigError, ASRError, AudioLoadError,
                  PromptFileError, SynthesisError, PrepareError, DataError, UserError, AccessDenied, LoginError,
                  RatingError, UnsafeLayoutError, SystemUnavailable, CampaignError, DesignError, RaterError,
                  NotYourItem, QualityError, SpeakerError)
    assert all(issubclass(cls, RumikError) for cls in everything)
    # what used to be a ValueError / RuntimeError still is, for `except ValueError` callers
    assert all(issubclass(cls, ValueError) for cls in (PromptError, ConfigError, CheckpointConfigError,
                                                       AudioLoadError, PromptFileError, UserError, LoginError))
    assert all(issubclass(cls, RuntimeError) for cls in (CheckpointError, ASRError, SynthesisError, DataError,
                                                         PrepareError, SystemUnavailable))
    import rumik_app.model.config
    import training.common
    import training.config

    assert training.config.ConfigError is ConfigError  # one ConfigError
    assert not hasattr(rumik_app.model.config, "ConfigError") and not hasattr(training.common, "ConfigError")


