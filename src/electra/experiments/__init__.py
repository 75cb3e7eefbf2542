"""Commands that run others: `compare` (objectives at equal compute) and `demo`, and
`plot`."""
