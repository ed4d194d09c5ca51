"""The published checkpoint format: builder and loader agree, no remote code, clear errors."""

import json
import shutil

import pytest
import torch
from safetensors import safe_open

from rumik_app import CheckpointError, SynthesisRequest, TTSEngine
from rumik_app.checkpoint.load import resolve_checkpoint, save_checkpoint
from rumik_app.checkpoint.tiny import TinySpec, config_dict
from rumik_app.model.config import RumikOSSConfig


def test_folder_has_published_files_and_keys(tiny_checkpoint):
    names = {p.name for p in tiny_checkpoint.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors", "codec"} <= names
    assert not list(tiny_checkpoint.rglob("*.py")), "a checkpoint must load without python files"
    cfg = json.loads((tiny_checkpoint / "config.json").read_text())
    assert cfg["model_type"] == "rumik_oss" and cfg["architectures"] == ["RumikOSSForCausalLM"]
    assert set(cfg["auto_map"]) == {"AutoConfig", "AutoModelForCausalLM"}
    for key in ("first_unit_id", "last_unit_id", "num_quantizers", "codebook_size", "text_start_token_id",
                "audio_start_token_id", "audio_end_token_id", "frame_rate_hz", "speakers"):
        assert key in cfg
    with safe_open(str(tiny_checkpoint / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
    assert {k.rsplit(".", 1)[0] for k in keys if k.startswith("stop_predictor")} == {
        "stop_predictor.0", "stop_predictor.1", "stop_predictor.3"}
    codec = {p.name for p in (tiny_checkpoint / "codec").iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= codec
    with safe_open(str(tiny_checkpoint / "codec" / "model.safetensors"), "pt") as f:
        ckeys = list(f.keys())
        embed = f.get_tensor("quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum")
    assert any(k.startswith("encoder_transformer.") for k in ckeys)  # legacy kyutai/mimi layout
    assert embed.abs().sum() > 0, "codebooks must not be all zero"


def test_tokenizer_places_audio_tokens_at_config_ids(tiny_engine):
    tok, lay = tiny_engine.tokenizer, tiny_engine.layout
    assert tok.convert_tokens_to_ids("<0_0>") == lay.first_unit_id
    assert tok.convert_tokens_to_ids("<2047_7>") == lay.last_unit_id
    assert tok.convert_tokens_to_ids("<5_3>") == lay.unit_id(5, 3)
    assert tok.convert_tokens_to_ids(["<text>", "<audio>", "</audio>"]) == [
        lay.text_start_token_id, lay.audio_start_token_id, lay.audio_end_token_id]
    ids = tiny_engine.prompt_ids(SynthesisRequest("नमस्ते <laugh> hi"))
    assert ids[0] == tiny_engine.bos_id and ids[1] == lay.text_start_token_id and ids[-1] == lay.audio_start_token_id


def test_weights_round_trip_through_loader(tiny_checkpoint, tiny_engine):
    with safe_open(str(tiny_checkpoint / "model.safetensors"), "pt") as f:
        for key in f.keys():
            assert torch.equal(tiny_engine.model.state_dict()[key], f.get_tensor(key).float()), key
    model = tiny_engine.model
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_parameter_count_of_published_shape_matches_design():
    cfg = RumikOSSConfig.from_dict(config_dict(TinySpec.real_width(layers=36)))
    from rumik_app.model.lm import RumikOSSForCausalLM

    with torch.device("meta"):
        model = RumikOSSForCausalLM(cfg.lm)
    assert sum(p.numel() for p in model.parameters()) == 3_381_533_697


def test_save_checkpoint_round_trip(tiny_checkpoint, tiny_engine, tmp_path):
    out = save_checkpoint(tiny_engine.model, tiny_engine.config, tiny_checkpoint, tmp_path / "saved")
    original = json.loads((tiny_checkpoint / "config.json").read_text())
    saved = json.loads((out / "config.json").read_text())
    assert saved == original
    reloaded = TTSEngine.from_pretrained(str(out), device="cpu")
    req = SynthesisRequest("round trip", seed=5, max_new_tokens=24)
    assert torch.equal(reloaded.generate_batch([req]).token_ids, tiny_engine.generate_batch([req]).token_ids)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys()


def test_remote_code_in_folder_is_never_executed(tiny_checkpoint, tmp_path):
    folder = tmp_path / "hostile"
    shutil.copytree(tiny_checkpoint, folder)
    marker = tmp_path / "executed"
    payload = f"open({str(marker)!r}, 'w').write('pwned')\n"
    for name in ("modeling_rumik_oss.py", "configuration_rumik_oss.py"):
        (folder / name).write_text(payload)
    TTSEngine.from_pretrained(str(folder), device="cpu")
    assert not marker.exists()


def test_transformers5_style_config_loads_equivalently(tiny_checkpoint):
    data = json.loads((tiny_checkpoint / "config.json").read_text())
    v5 = dict(data)
    v5["rope_parameters"] = {"rope_type": "default", "rope_theta": v5.pop("rope_theta")}
    v5.pop("rope_scaling")
    v5["dtype"] = v5.pop("torch_dtype")
    a, b = RumikOSSConfig.from_dict(data).lm, RumikOSSConfig.from_dict(v5).lm
    assert a.rope_parameters == b.rope_parameters and a.layer_types == b.layer_types


def test_missing_path_gives_one_clear_message(tmp_path):
    with pytest.raises(CheckpointError) as err:
        TTSEngine.from_pretrained(str(tmp_path / "nope"))
    msg = str(err.value)
    assert "No checkpoint folder" in msg and "--model tiny" in msg and "local checkpoint folder" in msg


def test_offline_hub_id_gives_one_clear_message():
    with pytest.raises(CheckpointError) as err:
        resolve_checkpoint("rumik-ai/rumik-oss-1-not-cached")
    msg = str(err.value)
    assert "offline" in msg and "hf download rumik-ai" in msg and "--model tiny" in msg


def test_incomplete_folder_lists_missing_files(tiny_checkpoint, tmp_path):
    folder = tmp_path / "partial"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "model.safetensors").unlink()
    shutil.rmtree(folder / "codec")
    with pytest.raises(CheckpointError) as err:
        resolve_checkpoint(str(folder))
    assert "model.safetensors" in str(err.value) and "codec/model.safetensors" in str(err.value)


def test_model_tiny_builds_once_into_cache():
    first = resolve_checkpoint("tiny")
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_checkpoint("tiny") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
