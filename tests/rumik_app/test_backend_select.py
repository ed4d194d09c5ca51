"""Backend selection: `load_engine(backend=...)`, the shared engine flags of the CLI,
evaluation.run and app.py (`rumik_app.cli_args`), and the message when vLLM is not in this
environment (simulated: vLLM is installed in the one test environment).

The vLLM backend itself is tested in tests/vllm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rumik_app.cli_args import add_engine_arguments, add_voices_argument, engine_kwargs
from rumik_app.engine import loading
from rumik_app.engine.loading import load_engine
from rumik_app.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
VLLM_FIX = "pip install -e .[vllm]"


@pytest.fixture
def no_vllm(monkeypatch):
    """This process as if vLLM were not installed (the project and its entry points still are)."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ModuleNotFoundError
    for name in [name for name in sys.modules if name == "rumik_vllm" or name.startswith("rumik_vllm.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture
def no_vllm_env(tmp_path) -> dict:
    """An environment for subprocesses in which `import vllm` fails, as where it is not installed."""
    shadow = tmp_path / "no-vllm"
    (shadow / "vllm").mkdir(parents=True)
    (shadow / "vllm" / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'vllm\'", name="vllm")\n')
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)])}


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    return parser.parse_args(list(argv))


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env or {**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


def test_engine_flags_become_load_engine_arguments():
    assert engine_kwargs(_parse()) == {"backend": "engine"}
    assert engine_kwargs(_parse("--device", "cpu", "--no-compile", "--dtype", "bf16")) == {
        "backend": "engine", "device": "cpu", "dtype": "bf16", "compile": False}
    assert engine_kwargs(_parse("--backend", "vllm", "--tensor-parallel-size", "2",
                                "--gpu-memory-utilization", "0.7")) == {
        "backend": "vllm", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.7}
    with pytest.raises(ValueError, match="--tensor-parallel-size apply to --backend vllm only"):
        engine_kwargs(_parse("--tensor-parallel-size", "2"))


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "128MiB", ""])
def test_a_kv_cache_size_that_is_not_a_positive_whole_number_of_bytes_is_a_usage_error(value, capsys):
    assert engine_kwargs(_parse("--backend", "vllm", "--kv-cache-memory-bytes", "134217728")) == {
        "backend": "vllm", "kv_cache_memory_bytes": 134217728}
    with pytest.raises(SystemExit) as exit_:
        _parse("--backend", "vllm", "--kv-cache-memory-bytes", value)
    assert exit_.value.code == 2 and "a whole number of bytes above zero" in capsys.readouterr().err


def test_a_voice_library_on_vllm_starts_vllm_with_lora():
    def parse(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_engine_arguments(parser)
        add_voices_argument(parser)
        return parser.parse_args(list(argv))

    assert engine_kwargs(parse("--voices", "v/")) == {"backend": "engine"}  # the engine's bank: use_library
    assert engine_kwargs(parse("--backend", "vllm", "--voices", "v/")) == {
        "backend": "vllm", "enable_lora": True, "max_loras": 16, "max_lora_rank": 64}
    assert engine_kwargs(parse("--backend", "vllm", "--voices", "v/", "--max-adapters", "4",
                               "--adapter-rank", "16"))["max_loras"] == 4


def test_load_engine_rejects_unknown_backends_and_misplaced_options(tiny_checkpoint):
    with pytest.raises(ValueError, match="Unknown backend 'tensorrt'"):
        load_engine(str(tiny_checkpoint), backend="tensorrt")
    with pytest.raises(TypeError, match="backend='vllm' only"):
        load_engine(str(tiny_checkpoint), device="cpu", tensor_parallel_size=2)


def test_vllm_backend_without_vllm_names_the_fix(tiny_checkpoint, no_vllm):
    with pytest.raises(CheckpointError, match=r"pip install -e \.\[vllm\]"):
        load_engine(str(tiny_checkpoint), backend="vllm")


@pytest.mark.slow
def test_cli_and_runner_report_a_missing_vllm_in_one_line(tiny_checkpoint, tmp_path, no_vllm_env, no_vllm, capsys):
    """The CLI in a fresh process where `import vllm` fails; the runner and the misplaced flag in this
    process with vLLM hidden (`no_vllm`), through the same main(argv)."""
    from evaluation.run import main as run_main
    from rumik_app.synthesize import main as synthesize_main

    proc = _run(["rumik_app.synthesize", "--model", str(tiny_checkpoint), "--text", "hi", "--backend", "vllm",
                 "--out", str(tmp_path / "x.wav")], no_vllm_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: backend='vllm' needs vLLM") and VLLM_FIX in proc.stderr
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "text": "Hello there.", "language": "en", "domain": "conversation"}\n')
    status = run_main(["--system", f"rumik:{tiny_checkpoint}", "--backend", "vllm", "--prompts", str(prompts),
                       "--asr", "pocketsphinx", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2 and VLLM_FIX in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exited:  # argparse's usage error: status 2, as the shell sees it
        synthesize_main(["--model", "tiny", "--text", "hi", "--tensor-parallel-size", "2",
                         "--out", str(tmp_path / "x.wav")])
    assert exited.value.code == 2 and "apply to --backend vllm only" in capsys.readouterr().err


def test_app_registry_puts_the_vllm_failure_in_its_banner(tiny_checkpoint, no_vllm):
    from webapp.systems import SYSTEM_RUMIK, SYSTEM_TINY, SystemRegistry

    reg = SystemRegistry(model=str(tiny_checkpoint), device="cpu", backend="vllm")
    status = reg.preload(SYSTEM_RUMIK)
    assert status.state == "failed" and VLLM_FIX in status.message
    assert VLLM_FIX in reg.banner_markdown()
    assert reg._args(SYSTEM_TINY)[0] == "engine"  # tiny stays on the in-process engine


class _FakeVLLMEngine:
    """Stands in for VLLMEngine where only the wiring of the server's flags is checked."""

    sample_rate, voices = 24_000, ("Ira",)

    def __init__(self, **kwargs):
        from types import SimpleNamespace

        self.kwargs, self.layout = kwargs, SimpleNamespace(tokens_per_second=100.0)

    def close(self) -> None:
        pass

    def max_new_tokens_for(self, seconds: float) -> int:
        from rumik_app.request import tokens_for_seconds

        return tokens_for_seconds(seconds)


def test_serve_passes_the_vllm_flags_to_the_engine(monkeypatch):
    from rumik_app.serve.__main__ import build_server, parse_args

    made = []

    def fake_load_engine(model, **kwargs):
        made.append(_FakeVLLMEngine(model=model, **kwargs))
        return made[-1]

    monkeypatch.setattr(loading, "load_engine", fake_load_engine)
    args = parse_args(["--model", "m", "--backend", "vllm", "--max-batch", "48", "--max-queue", "5",
                       "--tensor-parallel-size", "2", "--data-parallel-size", "3", "--gpu-memory-utilization",
                       "0.7", "--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray",
                       "--no-compile", "--dtype", "bf16"])
    server = build_server(args)
    assert made[0].kwargs == {"model": "m", "backend": "vllm", "max_num_seqs": 48, "tensor_parallel_size": 2,
                              "data_parallel_size": 3, "pipeline_parallel_size": 2,
                              "distributed_executor_backend": "ray", "gpu_memory_utilization": 0.7, "compile": False,
                              "dtype": "bf16"}
    adapter = server.adapter
    assert (adapter.backend, adapter.max_batch, adapter.max_queue, adapter.owns_engine) == ("vllm", 48, 5, True)
    from rumik_app.serve.__main__ import CONNECTION_HEADROOM

    assert server.config.limit_concurrency == 48 + 5 + CONNECTION_HEADROOM  # uvicorn answers 503 beyond it


def test_serve_refuses_vllm_flags_on_the_engine_backend(capsys):
    from rumik_app.serve.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--model", "tiny", "--tensor-parallel-size", "2"])
    assert "--tensor-parallel-size apply to --backend vllm only" in capsys.readouterr().err


def test_serve_with_vllm_missing_is_one_message_and_exit_code_2(tiny_checkpoint, capsys, monkeypatch, no_vllm):
    from rumik_app.serve.__main__ import main

    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # main() sets it for vLLM; keep this process's as it was
    assert main(["--model", str(tiny_checkpoint), "--backend", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: backend='vllm' needs vLLM") and VLLM_FIX in err
