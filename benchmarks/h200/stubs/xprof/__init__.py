"""Stand-in for the xprof package on the benchmark machine (benchmarks/h200/README.md): nothing but the one
name tokamax imports when it loads."""
