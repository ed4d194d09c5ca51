"""Voice packages read as hostile input: a damaged adapter or a record of the wrong types is refused by
name, and a library lists it as a problem instead of failing (every request reads the library).

Run: .venv/bin/python -m pytest -n0 tests/rumik_app/voices/test_package.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rumik_app.voices.library import VoiceLibrary
from rumik_app.voices.lora import AdapterBank, AdapterBankFull
from rumik_app.voices.package import ADAPTER_FILE, VOICE_FILE, VoiceError, read_package
from tests.rumik_app.voices.packages import archive_of, write_voice

BASE = "sha256:" + "0" * 64


@pytest.fixture
def voice(tmp_path) -> Path:
    return write_voice(tmp_path / "voices", "Arjun", BASE)


def edit_record(folder: Path, change) -> None:
    record = json.loads((folder / VOICE_FILE).read_text())
    change(record)
    (folder / VOICE_FILE).write_text(json.dumps(record))


@pytest.mark.parametrize("change", [
    lambda r: r["consent"].update(statement=5),
    lambda r: r["consent"].update(evidence_file=["consent.txt"]),
    lambda r: r.update(base_fingerprint=7),
    lambda r: r.update(evaluation=5),
    lambda r: r.update(training=[1, 2]),
    lambda r: r.update(data_hours="many"),
    lambda r: r.update(languages=[1]),
    lambda r: r["consent"].update(verification=["recording"]),
], ids=["statement", "evidence-list", "fingerprint", "evaluation", "training", "hours", "languages", "verification"])
def test_a_record_of_the_wrong_types_is_refused_and_only_that_voice_is_skipped(voice, change):
    edit_record(voice, change)
    with pytest.raises(VoiceError, match="not a voice package's record"):
        read_package(voice)
    write_voice(voice.parent, "Meera", BASE, seed=1)
    library = VoiceLibrary(voice.parent, BASE)
    assert library.names() == ("Meera",) and "Arjun" in library.problems


def test_nan_and_deep_nesting_in_voice_json_are_refused(voice):
    text = (voice / VOICE_FILE).read_text()
    (voice / VOICE_FILE).write_text(text.replace('"wer": 0.04', '"wer": NaN'))
    with pytest.raises(VoiceError, match="not valid JSON"):
        read_package(voice)
    (voice / VOICE_FILE).write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(VoiceError):
        read_package(voice)
    assert "Arjun" in VoiceLibrary(voice.parent, BASE).problems


def test_an_adapter_whose_data_does_not_match_its_header_is_refused_on_import(voice, tmp_path):
    adapter = voice / ADAPTER_FILE
    adapter.write_bytes(adapter.read_bytes()[:-4])  # truncated: the header still parses
    with pytest.raises(VoiceError, match="truncated or altered"):
        read_package(voice)
    with pytest.raises(VoiceError, match="truncated or altered"):
        VoiceLibrary(tmp_path / "other", BASE).import_archive(archive_of(voice))


def test_the_imported_adapter_config_is_always_voice_jsons(voice, tmp_path):
    (voice / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4.0,
                                                           "use_rslora": True, "rank_pattern": {".*": 64}}))
    package = VoiceLibrary(tmp_path / "other", BASE).import_archive(archive_of(voice))
    written = json.loads((tmp_path / "other" / package.name / "adapter_config.json").read_text())
    assert written["use_rslora"] is False and "rank_pattern" not in written and written["r"] == 2


class Model:
    """The little of a model an AdapterBank reads: its layers' projections and an embedding."""

    def __init__(self, shapes):
        import torch

        self.model = type("Body", (), {})()
        self.model.layers = []
        for layer in shapes:
            attn, mlp = torch.nn.Module(), torch.nn.Module()
            for name, (fan_in, fan_out) in layer.items():
                setattr(attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else mlp, name,
                        torch.nn.Linear(fan_in, fan_out, bias=False))
            self.model.layers.append(type("Layer", (), {"self_attn": attn, "mlp": mlp})())
        self.embedding = torch.nn.Embedding(4, 8)

    def get_input_embeddings(self):
        return self.embedding


def test_a_package_that_fails_to_load_fails_its_request_as_a_voice_error(voice):
    from tests.rumik_app.voices.packages import SMALL_SHAPES

    library = VoiceLibrary(voice.parent, BASE)

    def source(name):
        package = library.get(name)
        return (name, 1), lambda: (package, (_ for _ in ()).throw(FileNotFoundError("gone mid-replace")))

    bank = AdapterBank(Model(SMALL_SHAPES), source, capacity=1, rank=2)
    with pytest.raises(VoiceError, match="could not be loaded"):
        bank.acquire("Arjun")
    good = AdapterBank(Model(SMALL_SHAPES), lambda name: ((name, 2), lambda: (library.get(name), {})), capacity=1,
                       rank=2)
    with pytest.raises(VoiceError, match="does not fit"):  # its tensors are not this model's
        good.acquire("Arjun")
    shutil.rmtree(voice)
    with pytest.raises(VoiceError):
        bank.acquire("Arjun")


def test_a_full_bank_is_a_capacity_error_not_a_bad_request(voice):
    from rumik_app.voices.package import load_adapter
    from tests.rumik_app.voices.packages import SMALL_SHAPES

    library = VoiceLibrary(voice.parent, BASE)
    write_voice(voice.parent, "Meera", BASE, seed=1)
    source = lambda name: ((name,), lambda: (library.get(name), load_adapter(library.path(name), library.get(name))))  # noqa: E731
    bank = AdapterBank(Model(SMALL_SHAPES), source, capacity=1, rank=2)
    bank.acquire("Arjun")
    with pytest.raises(AdapterBankFull, match="--max-adapters"):
        bank.acquire("Meera")
