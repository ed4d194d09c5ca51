"""The checkpoint's config.json as transformers' AutoConfig sees it inside vLLM.

config.json says `model_type: rumik_oss` and carries an `auto_map` to the publisher's python
files; without a registered class, transformers would want `trust_remote_code`. This class
is transformers' own `Cohere2Config` under our model_type (its constructor handles the 4.x
keys of the published file), and the audio-token fields stay on it as attributes
(`first_unit_id`, `num_quantizers`, `codebook_size`, `audio_end_token_id`, ...).
"""

from __future__ import annotations

from transformers import AutoConfig, Cohere2Config

from rumik_app.model.config import MODEL_TYPE


class RumikOSSVllmConfig(Cohere2Config):
    model_type = MODEL_TYPE


def register_config() -> None:
    """Map `model_type: rumik_oss` to RumikOSSVllmConfig (idempotent)."""
    AutoConfig.register(MODEL_TYPE, RumikOSSVllmConfig, exist_ok=True)
