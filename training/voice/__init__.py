"""Your own voices: a LoRA adapter of the body trained on a speaker's recordings, as a voice package.

    python -m training.voice create Arjun --audio recordings/arjun --consent consent.wav \\
        --statement "I, Arjun Rao, consent to ..." --out voices
    python -m training.voice create --smoke --out /tmp/voices
    python -m training.voice list --voices voices

    cli.py             `rumik voice`: create, list, show, delete, export, import (parses without torch)
    create.py          create's steps in order, cheap refusals first; the smoke run's driver
    voice_config.py    VoiceConfig ([data], [replay], [lora], [train], [eval]; saved in voice.json)
    data.py            recordings -> filtered 2-20 s clips with transcripts (cut by training.audio.vad),
                       prepare's manifests
    voice_trainer.py   VoiceTrainer: codes, replay, LoRA training, evaluation, the package
    synthesis_eval.py  real weights: speaker similarity and CER of held-out sentences
    smoke.py           the smoke's espeak-ng recordings, base checkpoint and verdict

Import the modules themselves; this package file imports nothing, so the command line and
`training.voice.voice_config` load without torch (docs/voices.md, "Adapting a voice").
"""
