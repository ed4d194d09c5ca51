"""The open arena's method: votes, Bradley–Terry leaderboard, pair sampling (docs/arena.md).

    bradley_terry   strengths from pairwise votes with ties, bootstrap intervals, ranks (numpy only)
    votes           the vote export (JSONL/CSV, one row per battle), read bounded, deduplicated by battle id
    sampling        the next pair (informative pairs favoured, every pair possible) and the next language
    simulate        votes from known strengths, for the tests and benchmarks/arena_sampling.py
    leaderboard     `rumik arena leaderboard VOTES`: the tables and pictures, from the export alone
"""
