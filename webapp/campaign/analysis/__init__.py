"""What the designs' records compute results with: scores on a scale (`scores`: screening,
statistics, charts), blind pairs (`pairs`: win rates, IndicEmo and NoVA), the reference tools'
file layouts (`formats`: the P.808 toolkit, webMUSHRA) and the audio judges (`judges`)."""
