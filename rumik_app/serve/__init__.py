"""OpenAI-compatible speech server: `POST /v1/audio/speech`, streamed, batched across requests.

    python -m rumik_app.serve --model rumik-ai/rumik-oss-1 --port 8000        # see __main__ for flags
    curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \
        -d '{"model": "rumik-oss-1", "input": "नमस्ते! <laugh>", "voice": "Ira", "response_format": "wav"}' > out.wav

Modules: `app` (FastAPI routes, errors, auth), `schema` (the request and its checks),
`encoding` (wav/pcm/mp3/opus/flac, streamed), `metrics` (Prometheus), `__main__` (CLI,
uvicorn, SIGTERM). The model side is a `rumik_app.backend.SpeechBackend`: the in-process
engine with continuous batching (`rumik_app.serve.scheduler`), or vLLM's engine (`--backend vllm`:
vLLM batches; `rumik_app.backend.AstreamBackend` adds admission, drain and stats).
"""

from rumik_app.serve.app import create_app

__all__ = ["create_app"]
