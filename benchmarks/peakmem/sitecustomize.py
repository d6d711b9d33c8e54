"""Benchmark-only hook: record a training process's peak device memory into its run directory.

On PYTHONPATH with MOEKIT_RECORD_PEAK_MEMORY=1, every Python process that imports JAX and whose arguments
carry base_output_directory=DIR (moekit's MaxText worker) writes DIR/peak_memory.json with
jax.local_devices()[i].memory_stats()['peak_bytes_in_use'] (the allocator's high-water mark) at exit.
A sampling thread also rewrites it every few seconds, so a run killed by a timeout or an OOM still has one.
"""

import atexit
import json
import os
import sys
import threading
import time


def _run_dir():
    for arg in sys.argv[1:]:
        if arg.startswith("base_output_directory="):
            return arg.split("=", 1)[1].strip("'\"")
    return None


def _dump(path):
    jax = sys.modules.get("jax")
    if jax is None:
        return
    try:
        from jax._src import xla_bridge

        if not xla_bridge._backends:  # never initialize a backend from here
            return
        stats = [d.memory_stats() or {} for d in jax.local_devices()]
    except Exception:
        return
    record = {
        "peak_bytes_in_use": max((s.get("peak_bytes_in_use", 0) for s in stats), default=0),
        "bytes_limit": max((s.get("bytes_limit", 0) for s in stats), default=0),
        "per_device": [{k: s.get(k) for k in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")} for s in stats],
        "time": time.time(),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def _sample(path):
    registered = False
    while True:
        time.sleep(3)
        _dump(path)
        if not registered and "jax" in sys.modules:
            atexit.register(_dump, path)  # registered after JAX's own handlers, so it runs before them
            registered = True


if os.environ.get("MOEKIT_RECORD_PEAK_MEMORY") == "1" and (_dir := _run_dir()):
    threading.Thread(target=_sample, args=(os.path.join(_dir, "peak_memory.json"),), daemon=True).start()
