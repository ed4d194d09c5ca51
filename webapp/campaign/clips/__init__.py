"""A campaign's audio, made before anyone rates: the test clips (`generate`), the extra clips a
design asks for (`extras`: references, anchors, gold, traps, the hearing check) and how the
derived ones are made (`stimuli`)."""
