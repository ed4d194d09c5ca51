"""tests/conftest.py's SHARED_SCOPES: every entry names a module or a test that exists.

A renamed module or test would leave its scope silently: it would then run on any worker and build
the shared fixture (a vLLM engine, a torchrun launch, a server) a second time.

Run: .venv/bin/python -m pytest tests/test_shared_scopes.py -q
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SHARED_SCOPES, shared_scope

ROOT = Path(__file__).resolve().parents[1]


def test_every_entry_names_a_module_or_a_test_that_exists():
    for name, entries in SHARED_SCOPES.items():
        for entry in entries:
            module, _, test = entry.partition("::")
            assert (ROOT / module).is_file(), (name, entry)
            if test:
                assert re.search(rf"^def {re.escape(test)}\(", (ROOT / module).read_text(), re.M), (name, entry)


def test_a_test_entry_takes_that_test_and_its_parameters_but_not_its_neighbours():
    entry = "tests/training/grpo/test_trainer.py::test_two_processes_match_one"
    assert shared_scope(entry) == "two-process"
    assert shared_scope(entry + "[x]") == "two-process"
    assert shared_scope(entry + "_too") is None
    assert shared_scope("tests/training/grpo/test_trainer.py::test_resume_continues_exactly") is None
    assert shared_scope("tests/vllm/test_serve.py::test_models_voices_and_health") == "vllm-engine"
