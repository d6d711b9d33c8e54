"""What runs inside each training process: the rendezvous and secrets (process), the fabric phase (fabric), the
run's own event records (step_events). Started as `python -m moekit.worker <module> key=value ...`."""
