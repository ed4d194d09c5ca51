"""OpenAI's speech API on this server: `POST /v1/audio/speech`, `GET /v1/audio/voices`, `GET /v1/models`.

Modules: `schema` (the request and its fields mapped onto `rumik_app.request.build_request`;
errors leave as OpenAI's body, `rumik_app.serve.errors.ApiError`), `routes` (the router the
app includes: the streamed response, SSE).
"""
