"""Shared pytest fixtures: a tiny random checkpoint in the published format, built once.

Tests never touch the network: the Hugging Face hub is forced offline, and every model is
built on the fly by `rumik_app.checkpoint.tiny` and loaded through the same code path a user's
`rumik-ai/rumik-oss-1` download takes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile

# Before anything imports huggingface_hub (it reads these at import time).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
MADE_HERE: list[str] = []  # temporary folders this process made, removed when its run ends (pytest_unconfigure)


def made_here(prefix: str) -> str:
    """A new temporary folder that this process removes when its pytest run ends."""
    MADE_HERE.append(tempfile.mkdtemp(prefix=prefix))
    return MADE_HERE[-1]


if "RUMIK_CACHE" not in os.environ:  # xdist's workers inherit the controller's, which removes it last
    os.environ["RUMIK_CACHE"] = made_here("rumik-test-cache-")
# CPU loads default to bf16 on CPUs with native bf16 (rumik_app.checkpoint.load.choose_dtype):
# the suite's exact oracles are fp32 on every machine, in-process and in the servers it spawns.
# tests/rumik_app/test_quantize.py unpins it to test the machine-dependent default itself.
os.environ.setdefault("RUMIK_CPU_DTYPE", "fp32")
# Ray starts its workers at nice 15 so that a driver stays responsive; here the workers are the test's own
# work, and niced under the other xdist workers' load they waited minutes for a core (a Ray run timed out
# before its first shard). At 0 they share the cores fairly. Read by each raylet the tests start.
os.environ.setdefault("RAY_worker_niceness", "0")
# Inductor compiles in a pool of worker processes, one per core, each importing torch (about 8 CPU s a
# compiling test, measured on test_fast_decode); beside the suite's own workers a pool buys nothing.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# httpx builds an SSL context for every client, even one that only speaks http:// to 127.0.0.1: each
# module-level httpx.get of a poll loop and each of gradio_client's requests. From a CA bundle file
# (SSL_CERT_FILE, else certifi's) OpenSSL 3 parses every certificate, 13-17 ms of CPU a client here;
# from the hashed system directory it reads one only when a handshake asks (0.1 ms). The tests make
# thousands: two gradio-heavy modules alone spent 43.5 CPU s with the file, 28.2 with the directory.
# httpx reads SSL_CERT_DIR when SSL_CERT_FILE is unset; OpenSSL's default file is the same bundle.
SYSTEM_CERT_DIR = "/etc/ssl/certs"
if os.path.isdir(SYSTEM_CERT_DIR) and any(name.endswith(".0") for name in os.listdir(SYSTEM_CERT_DIR)):
    os.environ.pop("SSL_CERT_FILE", None)
    os.environ["SSL_CERT_DIR"] = SYSTEM_CERT_DIR

import pytest  # noqa: E402
import torch  # noqa: E402

# Modules that take minutes (each starts vLLM engines, a fresh venv, or trains in several
# processes) go first: pytest-xdist's loadscope hands modules to workers in collection order,
# so a long module collected last would leave one core idle while the other finishes it.
LONG_MODULES_FIRST = ("tests/vllm/test_gpu_suite.py", "tests/test_install.py", "tests/vllm/", "tests/training/",
                      "tests/agents/", "tests/app/")


def _long_first(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((rank for rank, prefix in enumerate(LONG_MODULES_FIRST) if path.startswith(prefix)),
                len(LONG_MODULES_FIRST))


def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=_long_first)  # stable: the order within each group is pytest's


# Python's full garbage collections walk every tracked object: after collection a worker holds torch,
# transformers, gradio, vLLM's modules and every test module, and each full pass cost 0.3-0.5 s, 14% of a
# worker's CPU on a sample of the suite (22 passes, 7.3 of 51.8 CPU s). What exists once collection is done
# lives for the whole run, so it is frozen out of the collector's sight, and a full pass waits for 5x as many
# younger collections: 13 passes, 4.2 of 47.6 CPU s. Cyclic garbage is still collected, only later.
FULL_COLLECTION_EVERY = 50  # younger (generation 1) collections; Python's default is 10


def pytest_collection_finish(session) -> None:
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


# Modules that share a session fixture which takes a minute to build run on one xdist worker, so it is
# built once per session: loadscope gives each module to whichever worker is free, and every worker that
# receives a module using the fixture builds its own. "vllm-engine": tests/vllm's `vllm_engine` (an engine
# start is a minute of CPU on 2 cores), with `calibrated` and `engine64`; these modules only read from it,
# or put back what they change (test_grpo's weight pushes). A shared scope takes the place in the queue of
# its first module, so the long-first order holds; every other module stays a scope of its own.
SHARED_SCOPES = {
    "vllm-engine": ("tests/vllm/test_backend.py", "tests/vllm/test_grpo.py", "tests/vllm/test_repetition_penalty.py",
                    "tests/vllm/test_serve.py", "tests/vllm/test_sockets.py", "tests/vllm/test_voices.py"),
    # Not a shared fixture but a shared machine: each starts a local Ray of 3 actors, every one importing
    # torch and the judges; two at once double that load and its memory for their whole run.
    "ray": ("tests/training/test_prepare_engines.py", "tests/benchmarks/test_prepare_throughput.py"),
    # tests/agents' session `server` (a `rumik serve` process, ~10 CPU s to start): once, not once per worker.
    "agents": ("tests/agents/test_livekit.py", "tests/agents/test_openai_sdk.py", "tests/agents/test_pipecat.py",
               "tests/agents/test_rumik_sdk.py"),
    # tests/training's session `shared_launch` (one torchrun launch for all these runs; a launch is ~26 CPU s
    # before its first step). An entry with "::" is one test of a module whose other tests go anywhere.
    "two-process": ("tests/training/sft/test_fsdp.py", "tests/training/grpo/test_fsdp.py",
                    "tests/training/grpo/test_trainer.py::test_two_processes_match_one",
                    "tests/training/dpo/test_trainer.py::test_two_processes_match_one"),
}


def _in_entry(nodeid: str, entry: str) -> bool:
    """Whether a test is the SHARED_SCOPES entry: its module, or the test itself (any parameters)."""
    return nodeid == entry or nodeid.startswith((entry + "::", entry + "["))


def shared_scope(nodeid: str) -> str | None:
    """The SHARED_SCOPES name of a test (its module's or its own entry), or None."""
    return next((name for name, entries in SHARED_SCOPES.items() if any(_in_entry(nodeid, e) for e in entries)),
                None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` with SHARED_SCOPES: xdist's scheduler, each shared scope one work unit."""
    if config.getoption("dist") != "loadscope":
        return None  # xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_scope(nodeid) or super()._split_scope(nodeid)

    return SharedScopeScheduling(config, log)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: two workers per core. Part of the suite's time is spent waiting (servers starting,
    sockets, subprocesses), which the extra workers fill: on 2 cores the whole suite took 1,100 s with
    3 workers and 1,048 s with 4 (same commit, nothing else running; a /proc sampler saw both cores busy
    throughout the 4-worker run)."""
    cores = os.cpu_count() or 1
    return max(1, 2 * cores)


# RUMIK_TEST_CPU_LOG=DIR: each worker appends one JSON line per test to DIR/<worker>.jsonl with its
# wall seconds and the CPU seconds its process and its finished children spent in it (setup, call and
# teardown; a shared fixture's cost lands on the test that built it or tore it down). Wall time under
# xdist measures contention as much as work; CPU is what the suite's 2 cores must fit. Not counted:
# processes that are not this worker's reaped children (Ray's actors, a server still running).
CPU_LOG = os.environ.get("RUMIK_TEST_CPU_LOG")


def _cpu_seconds() -> tuple[float, float]:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    import json
    import time

    start, (own, children) = time.perf_counter(), _cpu_seconds()
    yield
    wall, (own_after, children_after) = time.perf_counter() - start, _cpu_seconds()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {"test": item.nodeid, "wall_s": round(wall, 2), "cpu_s": round(own_after - own, 2),
           "children_cpu_s": round(children_after - children, 2)}
    os.makedirs(CPU_LOG, exist_ok=True)
    with open(os.path.join(CPU_LOG, f"{worker}.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps(row) + "\n")


# Tiny models gain nothing from intra-op threads, and OpenMP spin-waits make them crawl
# when another process holds the second core.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> "os.PathLike":
    """Path to a tiny random checkpoint (hidden 64, 2 layers) in the exact published format."""
    from rumik_app.checkpoint.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "rumik-oss-1-tiny")


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint):
    """A TTSEngine on the tiny checkpoint (CPU, float32). Do not leave it modified."""
    from rumik_app import TTSEngine

    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


@contextlib.contextmanager
def stop_head_bias(engine, bias: float):
    """Temporarily set the stop head's output bias: large positive stops at the first
    allowed boundary, large negative never stops."""
    layer = engine.model.stop_predictor[3]
    old = layer.bias.detach().clone()
    with torch.no_grad():
        layer.bias.fill_(bias)
    try:
        yield
    finally:
        with torch.no_grad():
            layer.bias.copy_(old)


NEVER_STOP = -1e4
ALWAYS_STOP = 1e4


@pytest.fixture
def hub_downloads(monkeypatch) -> list[dict]:
    """The keyword arguments of every huggingface_hub.snapshot_download call (each still runs):
    a test asserts that only the local cache was read (`local_files_only`), not how long it took."""
    import huggingface_hub

    calls, real = [], huggingface_hub.snapshot_download

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recording)
    return calls


# The published width (hidden 2048, 16/4 heads x 128, FFN 11008) at 2 layers and the tiny
# vocabulary: real kernel shapes for quantisation tests, ~0.4 GB on disk, ~0.8 GB in float32.
REAL_WIDTH_LAYERS = 2


@pytest.fixture(scope="session")
def real_width_checkpoint(tmp_path_factory) -> "os.PathLike":
    """A random checkpoint of the published width at REAL_WIDTH_LAYERS layers, tiny vocabulary."""
    from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint

    spec = TinySpec(hidden=2048, layers=REAL_WIDTH_LAYERS, heads=16, kv_heads=4, ffn=11008, logit_scale=0.125)
    return build_tiny_checkpoint(tmp_path_factory.mktemp("real-width") / "rumik-oss-1-real-width", spec)


def pytest_unconfigure(config) -> None:
    """Remove this process's temporary folders (`made_here`); a test's own go with pytest's tmp_path. The
    frozen objects go back to the collector, so the interpreter's exit frees them (nanobind's extension
    types count what was never freed, and say so)."""
    gc.unfreeze()
    for folder in MADE_HERE:
        shutil.rmtree(folder, ignore_errors=True)
