"""`python app.py --quantize int8`: the app synthesises from int8 weights (rumik_app.model.quantize).

Run: .venv/bin/python -m pytest tests/app/test_quantize_app.py -q
"""

from __future__ import annotations

import pytest
import soundfile as sf

from tests.app.conftest import free_port, start_app_process, wait_until_up


@pytest.mark.slow
def test_the_app_synthesises_24khz_audio_from_int8_weights(tiny_checkpoint, tmp_path):
    from gradio_client import Client

    port, log = free_port(), tmp_path / "app.log"
    proc = start_app_process(str(tiny_checkpoint), tmp_path / "data", port, log, "--quantize", "int8",
                             "--device", "cpu")
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, proc)
        wav = Client(url, verbose=False).predict(text="Quantised in the app.", system="rumik-oss-1", seed=3,
                                                 max_seconds=1.0, api_name="/synthesize")
        assert sf.info(wav).samplerate == 24_000 and sf.info(wav).frames > 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "int8 (aten _weight_int8pack_mm" in log.read_text()  # the load line, with the bytes before and after
