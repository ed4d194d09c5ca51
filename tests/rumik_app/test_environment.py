"""rumik_app.environment: variables set or unset for a while, each put back as it was on the way out."""

from __future__ import annotations

import os

import pytest

from rumik_app.environment import environment


def test_set_and_unset_inside_and_back_as_they_were_after_an_error(monkeypatch):
    monkeypatch.setenv("RUMIK_TEST_SET", "before")
    monkeypatch.delenv("RUMIK_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError), environment({"RUMIK_TEST_SET": None, "RUMIK_TEST_UNSET": "inside"}):
        assert "RUMIK_TEST_SET" not in os.environ and os.environ["RUMIK_TEST_UNSET"] == "inside"
        raise RuntimeError("the body failed")
    assert os.environ["RUMIK_TEST_SET"] == "before" and "RUMIK_TEST_UNSET" not in os.environ
    with environment({}):  # nothing to change: nothing changes
        assert os.environ["RUMIK_TEST_SET"] == "before"
