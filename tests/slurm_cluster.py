"""A one-host Slurm cluster for the Slurm tests: Debian's slurm-wlm (22.05) and munge, started here.

munged, slurmctld and slurmd run in the foreground as this test run's children, each with the one
slurm.conf written here, their state, spool and log files in one temporary folder, and ports chosen free
at start, so they never meet a system Slurm or another test run on the same machine. The node is this
host under its own name with the CPUs it has; it also declares 8 GPUs (gres over empty stand-in files), so
`sbatch --test-only` can judge a GPU script's resource request. Nothing here trains on them.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd"}  # binary -> Debian package
CLIENTS = ("sbatch", "scontrol", "scancel", "sinfo", "squeue")
SBIN = Path("/usr/sbin")
FAKE_GPUS = 8
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL")


def unavailable() -> str | None:
    """Why no cluster can run here (a reason for pytest.skip), or None."""
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd, which needs root"
    for name, pkg in DAEMONS.items():
        if not os.access(SBIN / name, os.X_OK):
            return f"{SBIN / name} is missing: apt-get install {pkg} (.ci/run does this on CI machines)"
    for name in CLIENTS:
        if shutil.which(name) is None:
            return f"{name} is missing: apt-get install slurm-wlm (.ci/run does this on CI machines)"
    return None


def _die_with_parent() -> None:
    """A daemon gets SIGTERM when the test run that started it dies, even by SIGKILL."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_name() -> str:
    """The name slurmd looks itself up by: the short host name."""
    return socket.gethostname().split(".")[0]


class Cluster:
    """munged + slurmctld + slurmd for one partition `debug` holding this host."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="moekit-slurm-"))  # short: munge's socket path is limited
        self.conf = self.root / "slurm.conf"
        self.node = node_name()
        self.cpus = len(os.sched_getaffinity(0))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: dict[str, subprocess.Popen] = {}

    # ---- start and stop ----

    def start(self, timeout_s: float = 90) -> None:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> None:
        self.root.chmod(0o755)  # munged wants its socket's folders open to all (execute), none writable by others
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = munge / "munge.sock"
        self._spawn(
            "munged",
            [
                str(SBIN / "munged"),
                "--foreground",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--log-file={munge / 'munged.log'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
        )
        self._wait_for(lambda: socket_path.exists(), "munged", 30)
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir()
        self.conf.write_text(self.slurm_conf(socket_path))
        gpus = self.root / "gpus"  # gres/gpu wants a device file per GPU; empty files stand in for them
        gpus.mkdir()
        for i in range(FAKE_GPUS):
            (gpus / f"nvidia{i}").touch()
        (self.root / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File={gpus}/nvidia[0-{FAKE_GPUS - 1}]\n")
        self._spawn("slurmctld", [str(SBIN / "slurmctld"), "-D", "-c", "-f", str(self.conf)])
        self._spawn("slurmd", [str(SBIN / "slurmd"), "-D", "-f", str(self.conf)])
        self._wait_for(self._node_idle, "the node to come up idle", timeout_s)

    def slurm_conf(self, munge_socket: Path) -> str:
        r = self.root
        return "\n".join(
            [
                "ClusterName=moekit-test",
                f"SlurmctldHost={self.node}",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={munge_socket}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={r / 'state'}",
                f"SlurmdSpoolDir={r / 'spool'}",
                f"SlurmctldPidFile={r / 'slurmctld.pid'}",
                f"SlurmdPidFile={r / 'slurmd.pid'}",
                f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",  # no cgroups needed
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "SchedulerType=sched/builtin",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "GresTypes=gpu",
                "ReturnToService=2",
                "KillWait=30",  # Slurm's default: how long a stopped task has between SIGTERM and SIGKILL
                "MinJobAge=3600",  # finished jobs stay visible to `scontrol show job` for the whole test run
                f"NodeName={self.node} CPUs={self.cpus} Gres=gpu:{FAKE_GPUS} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def stop(self) -> None:
        if "slurmctld" in self._procs:
            ids = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if ids:
                self.run("scancel", *ids, check=False)
                self._wait_for(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), "jobs to end", 60)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "w")
        self._procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=_die_with_parent
        )

    def _wait_for(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} while waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"waited {timeout_s} s for {what}:\n{self.logs()}")

    def _node_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip()
        return out == "idle"

    def logs(self, tail: int = 3000) -> str:
        files = [*self.root.glob("*.out"), *(self.root / "log").glob("*.log")]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in files if p.is_file())

    # ---- the clients ----

    def run(self, *argv: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        env = self.env | kw.pop("env", {})
        proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:3])} … exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc

    def sbatch(self, script: Path, *options: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        """Submit `script` from `cwd` (the job's submit directory); returns the job id."""
        out = self.run("sbatch", "--parsable", *options, str(script), cwd=cwd, env=env or {}).stdout
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a mapping (JobState, ExitCode, Restarts, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job_id: str, timeout_s: float) -> dict[str, str]:
        """Wait until the job has ended; returns its final record (or fails the test with the node's logs)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in FINAL:
                return info
            time.sleep(1)
        self.run("scancel", job_id, check=False)
        raise AssertionError(f"job {job_id} still {self.job(job_id).get('JobState')} after {timeout_s} s")
