"""Fixtures for the training tests: the session's one shared two-process launch.

Run: .venv/bin/python -m pytest tests/training -q
"""

from __future__ import annotations

import pytest

from tests.training.distributed import PLANS, Launched, launch_plans

FIXTURE = "shared_launch"


@pytest.fixture(scope="session")
def shared_launch(request, tmp_path_factory) -> dict[str, Launched]:
    """{module name: Launched} after ONE torchrun launch of every registered plan
    (tests.training.distributed.shared_plan) whose module has a test in this session that asks for
    this fixture: a launch costs ~26 CPU s before its first step, the runs themselves a few."""
    wanted = {item.module.__name__ for item in request.session.items if FIXTURE in item.fixturenames}
    plans = {name: plan for name, plan in PLANS.items() if name in wanted}

    def folder(name: str):
        return tmp_path_factory.mktemp(name.removeprefix("tests.training.").replace(".", "-"))

    return launch_plans(plans, folder, request)
