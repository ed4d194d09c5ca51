"""The speech server (docs/ARCHITECTURE.md §12, §15): OpenAI's `POST /v1/audio/speech`, streamed and
batched across requests, over either engine backend; Rumik's hosted-API routes and socket
(`/v1/tts`, `/v1/tts/ws`) for voice agents; text streamed in over `WS /v1/audio/speech/stream`.

    python -m rumik_app.serve --model rumik-ai/rumik-oss-1 --port 8000        # see __main__ for flags
    curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \
        -d '{"model": "rumik-oss-1", "input": "नमस्ते! <laugh>", "voice": "Ira", "response_format": "wav"}' > out.wav

By protocol, one router each: `openai` (schema: the speech request mapped onto the one request
builder; routes), `silk` (schema, session, routes: Rumik's hosted API), `text_in` (text deltas
in, sentences out), `ops` (health, metrics, admin), `openai.batch` (many requests in one), `jobs` (long renders that
survive a restart). What they share: `app` (create_app: the
routers, error handlers, lifespan; SpeechServer: SIGTERM drain), `protocol` (what a route
needs from an adapter: light), `context` (`ServeContext`: what every route shares, and its
request builder), `adapters` (`SchedulerAdapter` over the
engine's scheduler, `AsyncEngineAdapter` over vLLM, `load_adapter`), `errors` (`ApiError`),
`fields` (the sampling fields of every protocol, derived from their declarations), `gate`
(API key and body cap before FastAPI), `sockets` (WebSocket sessions: admission, drain, audio
frames), `encoding` (wav/pcm/mp3/opus/flac/aac/ulaw/alaw at 8-48 kHz, streamed and resampled
seam-free), `metrics` (Prometheus), `__main__`
(CLI, uvicorn, SIGTERM). Nothing is imported here, so `python -m rumik_app.serve --help` loads
no model stack.
"""
