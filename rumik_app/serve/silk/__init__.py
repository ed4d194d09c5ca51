"""Rumik's hosted-API protocol ("Silk") on this server, so its official clients work unchanged.

Modules: `schema` (fields, voices, tone tags and errors, mapped onto
`rumik_app.request.build_request`), `session` (one socket session: frames in, audio and
control frames out), `routes` (the router the app includes: `POST /v1/tts`,
`POST /v1/tts/ws-connect`, `WS /v1/tts/ws`). docs/ARCHITECTURE.md §15 describes the protocol.
"""
