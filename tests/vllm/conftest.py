"""Fixtures for the vLLM backend tests: one calibrated checkpoint, one engine of each backend.

These tests need the vLLM environment (`./setup.sh --vllm` builds .venv-vllm). In any other
environment every test here is skipped, and `pytest -ra` prints why. `.ci/run` sets
RUMIK_REQUIRE_VLLM=1 when it runs this suite from .venv-vllm, which turns a missing vLLM
into an error instead of a skip, so CI can never pass by skipping them.

vLLM's engine starts once per session (about 10-40 s on 2 cores, plus a first-request
warm-up), so the tests share it and keep their requests short.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

REQUIRE_ENV = "RUMIK_REQUIRE_VLLM"
SKIP_REASON = ("vLLM is not installed in this environment: the vLLM backend tests run from the vLLM "
               "environment (./setup.sh --vllm, then .venv-vllm/bin/python -m pytest tests/vllm; .ci/run does both)")
HAVE_VLLM = importlib.util.find_spec("vllm") is not None

if not HAVE_VLLM and os.environ.get(REQUIRE_ENV) == "1":
    raise RuntimeError(f"{REQUIRE_ENV}=1 but {SKIP_REASON}")

# vLLM's CPU backend reserves this many GiB for the KV cache (its default takes far more).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def calibrated(tmp_path_factory):
    """(checkpoint path, {role: request index}) of the calibrated float32 checkpoint."""
    from tests.vllm.calibrated import build_calibrated_checkpoint

    return build_calibrated_checkpoint(tmp_path_factory.mktemp("vllm") / "rumik-oss-1-tiny64")


@pytest.fixture(scope="session")
def engine64(calibrated):
    """The engine backend on the calibrated checkpoint (CPU, float32)."""
    from rumik_app import TTSEngine

    return TTSEngine.from_pretrained(str(calibrated[0]), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def vllm_engine(calibrated):
    """The vLLM backend on the same checkpoint; shut down at the end of the session."""
    from rumik_app.engine.loading import load_engine

    engine = load_engine(str(calibrated[0]), backend="vllm", device="cpu", dtype="float32")
    yield engine
    engine.close()
