"""Series of runs: each run a `moekit train` child with one record of status, failure class and numbers (trial),
`moekit train -m` (sweep), the search of `moekit tune` (tuning)."""
