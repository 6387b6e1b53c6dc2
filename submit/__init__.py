"""What talks to the leaderboard service: config, HTTP client, ledger, and the `submit` and
`submissions` commands (the other commands live in qrsub.cli)."""
