"""The speech server (docs/ARCHITECTURE.md §12, §15): OpenAI's `POST /v1/audio/speech`, streamed and
batched across requests, over either engine backend; Rumik's hosted-API routes and socket
(`/v1/tts`, `/v1/tts/ws`) for voice agents; text streamed in over `WS /v1/audio/speech/stream`.

    python -m rumik_app.serve --model rumik-ai/rumik-oss-1 --port 8000        # see __main__ for flags
    curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \
        -d '{"model": "rumik-oss-1", "input": "नमस्ते! <laugh>", "voice": "Ira", "response_format": "wav"}' > out.wav

Modules, from the HTTP side down: `__main__` (CLI, uvicorn, SIGTERM), `app` (FastAPI routes,
errors, auth), `schema` (the request and its checks), `encoding` (wav/pcm/mp3/opus/flac,
streamed), `metrics` (Prometheus), `protocol` (what the app needs from an adapter: light),
`adapters` (`SchedulerAdapter` over the in-process engine, `AsyncEngineAdapter` over vLLM,
`load_adapter`), `scheduler` (continuous batching for the in-process engine), `sockets`
(WebSocket sessions: admission, drain, audio frames), `silk` + `silk_schema` (Rumik's hosted
API), `text_in` (text deltas in, sentences out). Nothing is
imported here, so `python -m rumik_app.serve --help` loads no model stack.
"""
