"""Classify a failed training process from its exit code and its log (pure).

The class names a section of docs/troubleshooting.md, which lists its usual causes and fixes. Log
evidence wins over the exit code: a rendezvous that times out ends in SIGABRT, and an out-of-memory
kill may leave a message before the signal. Most classes are read from the log's tail; a full disk is
searched in the whole log, since the write that failed may lie far above the traceback it caused.
"""

from __future__ import annotations

import errno
import re
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

DOC = "docs/troubleshooting.md"


@dataclass(frozen=True, slots=True)
class FailureClass:
    """One kind of failure: its name, its troubleshooting section's title and the log lines that reveal it."""

    name: str
    title: str
    patterns: tuple[str, ...]
    """Regular expressions searched in the log tail (first class with a match wins)."""
    whole_log: bool = False
    """Search every line of the log, not only the tail."""
    trial_status: str = "failed"
    """What a series (series/tuning.py) calls a trial that ended with this class: failed, oom or timeout."""
    exit_status: int = 1
    """What `moekit train` exits with after an attempt that ended with this class (a JobSet's podFailurePolicy
    tells classes apart by it: render/jobset.py)."""

    def failure(self, returncode: int, evidence: str) -> Failure:
        """A failure of this class with its exit status and evidence (the classes moekit sets, not read from a log)."""
        return Failure(self.name, self.title, returncode, evidence)


TAIL_LINES = 200

# Order matters: the most specific evidence first. Disk full before out of memory: XLA and TensorStore report
# a failed write as RESOURCE_EXHAUSTED too.
CLASSES = (
    FailureClass(
        "disk_full",
        "disk full",
        (
            r"No space left on device",
            r"\bENOSPC\b",
            r"[Dd]isk quota exceeded",
            r"\bEDQUOT\b",
            r"RESOURCE_EXHAUSTED.*[Ff]ailed (writing|to write)",
        ),
        whole_log=True,
    ),
    FailureClass(
        "corrupt_checkpoint",
        "corrupt checkpoint",
        (  # what Orbax 0.12 / TensorStore say when a checkpoint's files are damaged or missing (restore)
            r"NoEntryError: .*Failed to load checkpointable",
            r"Metadata file \(named \w+\) does not exist",
            r"checkpointables: .* were not found in the checkpoint",
            r"(DATA_LOSS|OUT_OF_RANGE): .*(OCDBT|zarr|checkpoint)",
            r"Error (reading|decoding|opening) .* in OCDBT database",
        ),
    ),
    FailureClass(  # moekit.worker.fabric's own line: the check named a rank, its host and the link class
        "fabric",
        "fabric check failed",
        (r"moekit: fabric failure: .*",),
    ),
    FailureClass(  # MaxText 0.2.5 (trainers/pre_train/train.py) at its host check of the TE block's overflow flag
        "te_receive_overflow",
        "TE receive buffer overflow",
        (r"TE MoE receive capacity overflow at training step \d+",),
    ),
    FailureClass(
        "out_of_memory",
        "out of memory",
        (
            r"RESOURCE_EXHAUSTED",
            r"[Oo]ut of memory",
            r"CUDA_ERROR_OUT_OF_MEMORY",
            r"\bOOM\b",
            r"\bMemoryError\b",
        ),
        trial_status="oom",
    ),
    FailureClass(
        "nccl_error",
        "NCCL error",
        (
            r"nccl(Unhandled\w*|System|Internal|InvalidUsage|InvalidArgument|Remote)Error",
            r"NCCL (WARN|error|failure)",
            r"NCCL operation\b.*\bfailed",
        ),
    ),
    FailureClass(  # what jax.distributed 0.12's coordination service says when two jobs meet on one port
        "coordinator_conflict",
        "coordinator conflict",
        (
            r"unexpectedly tried to connect (with a different incarnation|while it is already in error)",
            r"ALREADY_EXISTS.*(newer|different) incarnation",  # the loser of two jobs that share a fixed port
            r"Unexpected task registered with task",
            r"Failed to add port to server.*(Address already in use|bind)",
            r"Failed to start RPC server",
        ),
    ),
    FailureClass(
        "rendezvous_timeout",
        "rendezvous timeout",
        (
            r"DEADLINE_EXCEEDED",
            r"CoordinationService/RegisterTask",
            r"[Ff]ailed to connect to (the )?coordination service",
            r"moekit: rendezvous failed",
        ),
        # EX_TEMPFAIL (sysexits.h): a peer never arrived within cluster.rendezvous_timeout_s. A JobSet fails on it
        # instead of restarting a group whose missing pod would be recreated as unschedulable as before.
        exit_status=75,
    ),
    FailureClass(
        "configuration_error",
        "configuration error",
        (
            r"validation errors? for \w*Config",
            r'File ".*/maxtext/configs/',
            r"Requested training up to step",
            r"Unknown flags? in XLA_FLAGS",
            r"Couldn't interpret value .* for flag",
            r"moekit: configuration error",
        ),
    ),
)
# MaxText's train loop ends quietly (exit 0, "Training stopped: ...") when its data loader raises: the data ran out
# (StopIteration) or reading a batch failed. Both are failures of the run: it did not train the steps it was given.
# MaxText 0.2.5 (common/data_loader.py): StopIteration -> "You may have run out of training data", any other
# exception -> "`next(self.data_iterator)` failed with <type> exception: (...)".
DATA_ENDED = FailureClass("data_ended", "data ran out", (r"run out of training data",))
DATA_ERROR = FailureClass(
    "data_error",
    "data pipeline failed",
    (r"`next\(self\.data_iterator\)` failed with .*", r"load_next_batch\(\)` failed"),
)
CLASSES = (DATA_ENDED, DATA_ERROR, *CLASSES)
# The loss became NaN or Inf: MaxText stops itself (abort_on_nan_loss, abort_on_inf_loss). Checked first and in the
# whole log: the abort is the training's own verdict, whatever else the log says (an async checkpoint save cut off by
# the abort prints a traceback of hundreds of lines after it: "cannot schedule new futures after shutdown").
NAN_LOSS = FailureClass("nan_loss", "loss not finite", (r"Aborting training due to (NaN|Inf) loss",), whole_log=True)
CLASSES = (NAN_LOSS, *CLASSES)
KILLED = FailureClass("killed", "killed by a signal", ())
OTHER = FailureClass("error", "error in the training program", ())
# Set by moekit itself, not read from a log: the run was asked to stop (run/preemption.py), or no step finished
# within run.stall_timeout_s (run/watchdog.py).
PREEMPTED = FailureClass("preempted", "preempted", ())
HANG = FailureClass("hang", "hang", ())
# Set by moekit: every process exited 0, yet the run recorded fewer steps than it was given (no data class's line).
UNFINISHED = FailureClass("unfinished", "ended before its last step", ())
# Set by moekit: a process could not be started at all (the kernel refused its arguments or environment).
NOT_STARTED = FailureClass("not_started", "processes could not start", ())
# What a series (series/trial.py) reads of a `moekit train` child that recorded no class of its own: still running
# at its time limit, refused before launching anything, or ended without writing its manifest's outcome.
TIMEOUT = FailureClass("timeout", "timed out", (), trial_status="timeout")
REFUSED = FailureClass("refused", "refused before launch", ())
UNRECORDED = FailureClass("error", "ended without a record", ())
ALL = (*CLASSES, KILLED, PREEMPTED, HANG, UNFINISHED, NOT_STARTED, TIMEOUT, REFUSED, UNRECORDED, OTHER)
BY_NAME = {c.name: c for c in ALL}  # "error": OTHER, the last (UNRECORDED shares its name and its meaning)
# The classes moekit acts on beyond printing them.
CORRUPT_CHECKPOINT = BY_NAME["corrupt_checkpoint"]  # run/checkpoints.py sets the checkpoint aside and resumes
DISK_FULL = BY_NAME["disk_full"]  # run/outcome.py says whether bytes or inodes ran out

# Written by moekit.worker around jax.distributed.initialize.
JOINING = "moekit: joining rendezvous"
JOINED = "moekit: rendezvous complete"


@dataclass(frozen=True, slots=True)
class Failure:
    """The class of one failed process: which class, the exit status and the evidence it was read from."""

    name: str
    title: str
    returncode: int
    evidence: str
    """The log line (or exit status) the class was read from."""

    @property
    def doc(self) -> str:
        """Where the class's causes and fixes are: its section of docs/troubleshooting.md."""
        return f"{DOC}#{anchor(self.title)}"

    def to_dict(self) -> dict[str, object]:
        """The failure as the run's manifest records it, with a `help` link to its troubleshooting section."""
        return {
            "class": self.name,
            "title": self.title,
            "returncode": self.returncode,
            "evidence": self.evidence,
            "help": self.doc,
        }


def anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, spaces as '-', punctuation dropped."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def signal_of(returncode: int) -> int | None:
    """The signal that ended a process: -N from Popen, or 128+N from a shell or container runtime."""
    if returncode < 0:
        return -returncode
    if 128 < returncode < 160:
        return returncode - 128
    return None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _excerpt(line: str, match: re.Match[str], width: int = 300) -> str:
    """The line, or the part of a long one around what matched."""
    line = line.strip()
    if len(line) <= width:
        return line
    start = max(0, min(match.start() - width // 2, len(line) - width))
    return ("..." if start else "") + line[start : start + width] + ("..." if start + width < len(line) else "")


def disk_full(exc: BaseException) -> str | None:
    """What an exception says when a write failed for lack of space (OSError ENOSPC/EDQUOT, or a writer's own
    error that reads like DISK_FULL's evidence: ArrayRecord's RuntimeError, TensorStore's RESOURCE_EXHAUSTED), the
    part of its message that says so; None for any other exception."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc.strerror or str(exc)
    for line in str(exc).splitlines():
        for pattern in DISK_FULL.patterns:
            if found := re.search(pattern, line):
                return _excerpt(line, found, 200)
    return None


def classify(returncode: int, log: str | Iterable[str], tail_lines: int = TAIL_LINES) -> Failure:
    """The class of one failed process (returncode != 0) from its output: text or lines (an open log file
    streams: only the last `tail_lines` are kept in memory, whole-log classes see every line)."""
    lines = log.splitlines() if isinstance(log, str) else log
    tail: deque[str] = deque(maxlen=tail_lines)
    whole = [(cls, [re.compile(p) for p in cls.patterns]) for cls in CLASSES if cls.whole_log]
    found: dict[str, str] = {}
    for line in lines:
        tail.append(line)
        for cls, rxs in whole:
            if cls.name not in found:
                m = next((m for rx in rxs if (m := rx.search(line))), None)
                if m:
                    found[cls.name] = _excerpt(line, m)
    for cls in CLASSES:
        if cls.whole_log:
            if cls.name in found:
                return Failure(cls.name, cls.title, returncode, found[cls.name])
            continue
        for pattern in cls.patterns:
            rx = re.compile(pattern)
            for line in reversed(tail):
                if m := rx.search(line):
                    return Failure(cls.name, cls.title, returncode, _excerpt(line, m))
    text = "\n".join(tail)
    if JOINING in text and JOINED not in text:
        return Failure("rendezvous_timeout", "rendezvous timeout", returncode, "the process never joined the job")
    sig = signal_of(returncode)
    if sig is not None and sig != signal.SIGABRT:
        return Failure(KILLED.name, KILLED.title, returncode, f"terminated by {_signal_name(sig)}")
    last = next((ln.strip() for ln in reversed(tail) if ln.strip()), f"exit status {returncode}")
    root = _root_cause(tail)
    evidence = f"{root} (then: {last})" if root and root != last else last
    return Failure(OTHER.name, OTHER.title, returncode, evidence[:300])


_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def _root_cause(lines: Iterable[str]) -> str | None:
    """The exception line that ended the first of chained tracebacks: Python prints the cause first, and the last
    line (often a context manager's "generator didn't stop after throw()") hides it."""
    previous = ""
    for line in lines:
        if line.startswith(_CHAINED) and previous:
            return previous
        if line.strip():
            previous = line.strip()
    return None


def unfinished(lines: Iterable[str], last: int | None, steps: int, recorded: bool) -> Failure | None:
    """Why an attempt whose processes all exited 0 did not train: a data class when its log says why MaxText
    stopped, `unfinished` when the metrics end before step `steps`-1 (`last`: the last recorded step, None: none;
    `recorded`: whether this launcher holds the metrics). None: it trained every step, or nothing says otherwise."""
    done = "no step" if last is None else f"steps 0-{last}"
    found: dict[str, str] = {}  # one pass over the log (it streams); the first line of each class
    classes = [(cls, [re.compile(p) for p in cls.patterns]) for cls in (DATA_ENDED, DATA_ERROR)]
    for line in lines:
        for cls, rxs in classes:
            if cls.name not in found and (m := next((m for rx in rxs if (m := rx.search(line))), None)):
                found[cls.name] = _excerpt(line, m)
    for cls, _ in classes:
        if cls.name in found:
            return Failure(cls.name, cls.title, 0, f"{found[cls.name]} (trained {done} of {steps})")
    if recorded and (last is None or last < steps - 1):
        return UNFINISHED.failure(0, f"every process exited 0 after {done} of {steps}")
    return None


def attempt(stopped: Failure | None, hang: Failure | None, crashed: Callable[[], Failure] | None) -> Failure | None:
    """The class of one attempt, in one precedence: a stop moekit was asked for (`preempted`, run/preemption.py)
    first, since its workers' exits are what the signal caused; then the watchdog's `hang` (run/watchdog.py); then
    the first failed process's class read from its log (`crashed`, called only then: it reads the whole log).
    None: the attempt succeeded."""
    if stopped is not None:
        return stopped
    if hang is not None:
        return hang
    return crashed() if crashed is not None else None


ERROR_LINE = "moekit: error: "  # how moekit prints an error that stops it (cli.py)


def of_child(
    returncode: int | None,
    timeout_s: float | None,
    timed_out: bool,
    recorded: Mapping[str, object] | None,
    console: str,
) -> Failure | None:
    """Why a `moekit train` child (a series' trial) did not finish, in one precedence: its time limit (`timeout`),
    then the class its run recorded in the manifest, then the error it printed when it stopped before launching
    (`refused`: a config the host cannot run, a busy run.dir), else `error` without a record. None: it exited 0."""
    code = returncode if returncode is not None else -1
    if timed_out:
        return TIMEOUT.failure(code, f"still running after {timeout_s or 0:g} s")
    if returncode == 0:
        return None
    if recorded:
        name, title = str(recorded.get("class", "")), str(recorded.get("title", ""))
        return Failure(name, title, code, str(recorded.get("evidence", "")))
    lines = console.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.startswith(ERROR_LINE)]
    if at:
        # A list of problems follows its heading ("N problem(s) ...:"): the problems are the evidence.
        listed = [ln.strip().removeprefix("- ") for ln in lines[at[-1] + 1 :] if ln.startswith("  - ")]
        evidence = "; ".join(listed) or lines[at[-1]].removeprefix(ERROR_LINE)
        return REFUSED.failure(code, evidence.strip()[:300])
    last = next((ln.strip()[:300] for ln in reversed(lines) if ln.strip()), "no output")
    return UNRECORDED.failure(code, last)


RENDEZVOUS_TIMEOUT = BY_NAME["rendezvous_timeout"]


def exit_status(failure: Failure) -> int:
    """What `moekit train` exits with after `failure`: its class's status (1 for most; render/jobset.py's pod
    failure policy reads the rendezvous timeout's)."""
    found = BY_NAME.get(failure.name)
    return found.exit_status if found is not None else 1
