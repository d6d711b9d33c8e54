"""`python -m moekit.worker <module> key=value ...`: what each training process runs (worker/process.py)."""

from moekit.worker.process import main

main()
