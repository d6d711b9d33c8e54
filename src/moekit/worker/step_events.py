"""Inside a training process: record when saves, restores, compilations, trace edges and step ends happened
(observe/runs/events.py describes the file), and keep the step a preemption saved at in the metrics.

MaxText stamps a step done right after dispatching it, then saves a checkpoint of it, then logs the metrics of
the step before; so a save is paid by the next step's time, and a step's time is only its own work while the
device pipeline is full. The summary (observe/runs/steady.py) needs to know which step windows such events fell in:
these wrappers around MaxText's own functions write them down as they happen, with wall-clock times.

MaxText 0.2.5 stops for a preemption notice from inside the save of step s, before it logs step s's metrics:
the step is trained and checkpointed, yet has no metrics record, and the next attempt starts at s + 1. The stop
is held back here until step s's metrics are queued, so MaxText's own flush on the way out writes them.
Likewise MaxText writes a step's record only once the next step is dispatched, while the checkpoint of a saved
step commits in the background: a kill between the two would leave a checkpointed step without a record. So a
saved step's record is written as soon as it is queued (the save has already waited for the step's results).

moekit's own stop flag: when the launcher is asked to stop it writes the step to stop at (MOEKIT_STOP names the
file; run/preemption.py decides the step). At each step boundary, right after MaxText stamped the step, the
worker looks for that file (one stat); from the step named on, MaxText's own preemption check
(checkpointing.reached_preemption, which decides whether to save and then raises StopTraining) answers yes, so
MaxText saves that step and stops as it does for JAX's preemption notice. The answer is taken once per step, so
the save and the stop of one step never disagree. JAX's sync point still answers where the flag is silent (a
worker signalled by a scheduler directly, a launch spread over several launchers).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from moekit.base import parse, quantities
from moekit.base.errors import MoekitError
from moekit.observe.runs import events as ev
from moekit.worker.appender import Appender

_file: Appender | None = None
_pending_stop: BaseException | None = None
_saved_step: int | None = None  # the last step whose maybe_save_checkpoint call saved
_stop_file: str | None = None  # moekit's stop flag (MOEKIT_STOP), looked for at every step boundary
_stop_at: int | None = None  # the step the flag names, once it is there
_stopping: int | None = None  # the step this worker stops at: MaxText's preemption check answers yes from it on
STOP_READ_BYTES = 4096  # the flag is one small JSON object; nothing larger is read
FORCE_ARG = 5  # MaxText 0.2.5's save_checkpoint(checkpoint_manager, step, state, config, data_iterator, force)


def _emit(record: dict[str, Any]) -> None:
    if _file is not None:
        _file.write(record)


def install(environ: dict[str, str]) -> None:
    """Open the events file the launcher named (MOEKIT_EVENTS) and wrap MaxText's save, restore, metrics and
    profiler calls and JAX's compilations; nothing when no file is named (a worker started by hand)."""
    global _file, _stop_file
    path = environ.get(ev.ENV)
    if not path:
        return
    _stop_file = environ.get(ev.STOP_ENV) or None
    _file = Appender(path)
    _emit({"event": ev.START, "t": time.time(), "pid": os.getpid()})
    _watch_compilations()
    _wrap_profiler()
    try:
        from maxtext.common import checkpointing, metric_logger
        from maxtext.utils import exceptions
    except ImportError:  # another trainer module: step stamps and saves are MaxText's
        return
    _wrap_checkpointing(checkpointing, exceptions.StopTraining)
    _wrap_metric_logger(metric_logger.MetricLogger)


def _watch_compilations() -> None:
    import jax

    def on_duration(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            end = time.time()
            _emit({"event": ev.COMPILE, "start": end - duration, "end": end})

    jax.monitoring.register_event_duration_secs_listener(on_duration)


def _wrap_profiler() -> None:
    import jax.profiler

    start, stop = jax.profiler.start_trace, jax.profiler.stop_trace

    def start_trace(*args: Any, **kwargs: Any) -> Any:
        _emit({"event": ev.TRACE_START, "t": time.time()})
        return start(*args, **kwargs)

    def stop_trace(*args: Any, **kwargs: Any) -> Any:
        try:
            return stop(*args, **kwargs)
        finally:
            _emit({"event": ev.TRACE_STOP, "t": time.time()})

    jax.profiler.start_trace, jax.profiler.stop_trace = start_trace, stop_trace


def _wrap_checkpointing(checkpointing: Any, stop_training: type[BaseException]) -> None:
    maybe_save, save, restore = (
        checkpointing.maybe_save_checkpoint,
        checkpointing.save_checkpoint,
        checkpointing.load_state_if_possible,
    )
    saving = threading.local()

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        saving.did = True
        step = getattr(saving, "step", None)
        _emit({"event": ev.SAVE_BEGIN, "step": step, "t": time.time()})  # for the watchdog
        if _stopping is not None and step is not None and step >= _stopping:
            # moekit's flag stops here, not JAX's sync point, which Orbax's manager asks too: it would decline
            if len(args) > FORCE_ARG:
                args = (*args[:FORCE_ARG], True, *args[FORCE_ARG + 1 :])
            else:
                kwargs["force"] = True
        return save(*args, **kwargs)

    def maybe_save_checkpoint(manager, state, config, data_iterator, step=None):
        global _pending_stop, _saved_step
        if step is not None:  # called right after MaxText stamped `step` done, on every step
            _emit({"event": ev.STEP_END, "step": int(step), "t": time.time()})
            _stop_here(int(step))
        saving.did, saving.step = False, None if step is None else int(step)
        began = time.time()
        try:
            return maybe_save(manager, state, config, data_iterator, step)
        except stop_training as exc:
            if step is None:
                raise
            _pending_stop = exc  # raised once this step's metrics are queued (metric logger below)
            _emit({"event": ev.STOP, "step": int(step), "t": time.time()})
            return None
        finally:
            if saving.did:
                which = None if step is None else int(step)
                _saved_step = which
                _emit({"event": ev.SAVE, "step": which, "start": began, "end": time.time()})

    def load_state_if_possible(*args: Any, **kwargs: Any) -> Any:
        began = time.time()
        _emit({"event": ev.RESTORE_BEGIN, "t": began})
        try:
            return restore(*args, **kwargs)
        finally:
            _emit({"event": ev.RESTORE, "start": began, "end": time.time()})

    checkpointing.save_checkpoint = save_checkpoint
    checkpointing.maybe_save_checkpoint = maybe_save_checkpoint
    checkpointing.load_state_if_possible = load_state_if_possible
    reached = getattr(checkpointing, "reached_preemption", None)
    if reached is None:  # a MaxText without that check: JAX's sync point alone decides
        return

    def reached_preemption(manager: Any, step: int) -> bool:
        if _stopping is not None and int(step) >= _stopping:
            return True  # moekit's flag: MaxText saves this step and stops
        return reached(manager, step)  # JAX's preemption sync point

    checkpointing.reached_preemption = reached_preemption


def _stop_here(step: int) -> None:
    """At the boundary after `step`: whether moekit's flag asks to stop here (decided once, before MaxText asks)."""
    global _stop_at, _stopping
    if _stopping is not None or _stop_file is None:
        return
    if _stop_at is None:
        try:  # one non-blocking open, no link followed: a pipe or device planted there is refused, never waited on
            found = parse.json_file(_stop_file, STOP_READ_BYTES, "stop flag", follow=False)["step"]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, MoekitError):  # half written: read again next boundary
            return
        if not quantities.valid("step", found):  # Infinity, 1e300, "3", true: not a step, so no stop here
            return
        _stop_at = found
    if step >= _stop_at:
        _stopping = step


FLUSH = "_flush_one_buffered_entry"  # MaxText 0.2.5's MetricLogger: write one queued entry


def _wrap_metric_logger(logger_class: Any) -> None:
    buffer = logger_class.buffer_and_write_metrics

    def buffer_and_write_metrics(self, metrics, step, step_time_delta=None, is_training=True):
        global _pending_stop
        out = buffer(self, metrics, step, step_time_delta, is_training)
        queued = getattr(self, "buffered_metrics", None)
        if is_training and step is not None and int(step) == _saved_step and queued and hasattr(self, FLUSH):
            getattr(self, FLUSH)(queued.pop(0))  # this saved step's record now, not after the next step
        if is_training and _pending_stop is not None:
            stop, _pending_stop = _pending_stop, None
            raise stop  # MaxText's train loop ends here and flushes the queued metrics of this step
        return out

    logger_class.buffer_and_write_metrics = buffer_and_write_metrics
