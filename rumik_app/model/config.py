"""The checkpoint's `config.json` (docs/ARCHITECTURE.md §2), read without remote code.

config.json is loaded as plain JSON. The Cohere2 part goes through transformers' own
`Cohere2Config` constructor, so its backward-compatibility handling applies to files written
by transformers 4.x (`rope_theta` at top level, `sliding_window_pattern`, `torch_dtype`) or
5.x (`rope_parameters`, `dtype`). The rumik-specific fields (`first_unit_id`, ... ,
`speakers`) are kept in `RumikOSSConfig`. The original JSON is kept too, so a checkpoint we
save (after training) is written in the same published format it was read in.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import Cohere2Config

from rumik_app.errors import CheckpointConfigError
from rumik_app.model.tokens import TokenLayout

MODEL_TYPE = "rumik_oss"
ARCHITECTURE = "RumikOSSForCausalLM"
AUTO_MAP = {
    "AutoConfig": "configuration_rumik_oss.RumikOSSConfig",
    "AutoModelForCausalLM": "modeling_rumik_oss.RumikOSSForCausalLM",
}
EXTRA_FIELDS = (
    "first_unit_id",
    "last_unit_id",
    "num_quantizers",
    "codebook_size",
    "text_start_token_id",
    "audio_start_token_id",
    "audio_end_token_id",
    "frame_rate_hz",
    "speakers",
)
# Keys that describe the file, not the network: never passed to Cohere2Config.
FILE_ONLY_KEYS = ("model_type", "architectures", "auto_map", "transformers_version", "_name_or_path")
DEFAULT_SPEAKERS = ("Ira", "Aisha", "Siya", "Zoya")


@dataclass
class RumikOSSConfig:
    """Everything in config.json: the Cohere2 body config plus the audio-token fields.

    lm: transformers `Cohere2Config` for the body (hidden size, layers, logit_scale, ...).
    layout: where audio tokens live (ids from config, never hard-coded).
    speakers: the voice names the checkpoint was trained with.
    raw: the JSON as read, re-used verbatim when saving so the format is preserved.
    """

    lm: Cohere2Config
    layout: TokenLayout
    speakers: tuple[str, ...] = DEFAULT_SPEAKERS
    raw: dict = field(default_factory=dict)

    @property
    def stop_hidden_size(self) -> int:
        """Width of the stop head's hidden layer: max(64, hidden // 4)."""
        return max(64, self.lm.hidden_size // 4)

    @classmethod
    def from_dict(cls, data: dict) -> "RumikOSSConfig":
        missing = [k for k in EXTRA_FIELDS if k not in data and k not in ("frame_rate_hz", "speakers")]
        if missing:
            raise CheckpointConfigError(f"config.json lacks the rumik-oss fields {missing}; "
                                        "is this a rumik-oss-1 checkpoint?")
        lm_kwargs = {k: v for k, v in data.items() if k not in EXTRA_FIELDS and k not in FILE_ONLY_KEYS}
        lm = Cohere2Config(**lm_kwargs)
        layout = TokenLayout.from_config(data)
        if int(data["last_unit_id"]) != layout.last_unit_id:
            raise CheckpointConfigError(
                f"config.json: last_unit_id {data['last_unit_id']} != first_unit_id + codebook_size * "
                f"num_quantizers - 1 = {layout.last_unit_id}"
            )
        if layout.audio_end_token_id >= lm.vocab_size:
            raise CheckpointConfigError("config.json: audio_end_token_id is outside the vocabulary")
        speakers = tuple(data.get("speakers") or DEFAULT_SPEAKERS)
        return cls(lm=lm, layout=layout, speakers=speakers, raw=copy.deepcopy(data))

    @classmethod
    def from_file(cls, path: str | Path) -> "RumikOSSConfig":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CheckpointConfigError(f"{path} is not valid JSON ({exc})") from exc
        return cls.from_dict(data)

    def to_dict(self, dtype_name: str | None = None) -> dict:
        """The config.json to save: the original JSON with the audio fields refreshed."""
        data = copy.deepcopy(self.raw)
        data.update(
            model_type=MODEL_TYPE,
            architectures=[ARCHITECTURE],
            auto_map=dict(data.get("auto_map") or AUTO_MAP),
            first_unit_id=self.layout.first_unit_id,
            last_unit_id=self.layout.last_unit_id,
            num_quantizers=self.layout.num_quantizers,
            codebook_size=self.layout.codebook_size,
            text_start_token_id=self.layout.text_start_token_id,
            audio_start_token_id=self.layout.audio_start_token_id,
            audio_end_token_id=self.layout.audio_end_token_id,
            frame_rate_hz=self.layout.frame_rate_hz,
            speakers=list(self.speakers),
        )
        if dtype_name:
            # transformers 4.x reads torch_dtype, 5.x reads dtype; keep whichever the file used.
            data["dtype" if "dtype" in data and "torch_dtype" not in data else "torch_dtype"] = dtype_name
        return data

    def save(self, out_dir: str | Path, dtype_name: str | None = None) -> Path:
        path = Path(out_dir) / "config.json"
        path.write_text(json.dumps(self.to_dict(dtype_name), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path
