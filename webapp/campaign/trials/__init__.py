"""What every design's plan is made of: trials and plans (`plan`), the shared dealing mechanisms
(`dealing`: blocks to rater slots, sides, Latin squares, gold and traps; `pairs`: blind A/B pairs
with repeats), their balance checks (`balance`) and the questions a page asks (`questions`)."""
