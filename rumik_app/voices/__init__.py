"""Library voices: LoRA adapters of the body trained on a speaker's recordings (docs/voices.md).

    rumik_app.voices.package   one voice's folder: voice.json, adapter.safetensors, consent
    rumik_app.voices.archive   a package's .zip, read as hostile input (names, sizes, zip bombs)
    rumik_app.voices.library   a folder of packages, reloaded when it changes; import, export, delete
    rumik_app.voices.lora      per-row LoRA for the engine's static body (an LRU bank of adapters)
"""
