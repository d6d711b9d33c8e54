"""The rendered 2-node smoke JobSet, run here the way a cluster would run it.

The emulator reads the manifest and does what the JobSet and Job controllers, the kubelet and the
cluster DNS do for each pod: it sets the controllers' labels and annotations, resolves every env entry
(value with $(VAR) expansion, downward-API fieldRefs), and starts the container's own command as a
separate process in its own mount and UTS namespaces, where /etc/hosts maps every pod hostname
(<jobset>-<rjob>-<job>-<pod>.<subdomain>) to loopback, as the headless service would. All pods share
one private network namespace, so their ports cannot meet anything else on this machine. Volumes of
the pod spec are bind mounts of host folders (a PersistentVolumeClaim is one folder per claim, shared by all
pods and restarts, as a ReadWriteMany volume is); the container's own filesystem under /mnt is a fresh tmpfs
per pod, so mount paths there need no folder on this machine. The image
is stood in for by this checkout's virtual environment (`moekit` on PATH) and its entrypoint script (the
Dockerfile's ENTRYPOINT, which runs when a container gives args and no command). A failed pod fails its Job
(backoffLimit: 0) and the JobSet then stops every other pod (failurePolicy), as the controller does. A
preempted (evicted) pod is deleted as the kubelet deletes one: SIGTERM to the container's PID 1, SIGKILL after
the pod's terminationGracePeriodSeconds; its DisruptionTarget condition fails its Job through the
podFailurePolicy, and the JobSet restarts the group under its failurePolicy rule for that reason. A pod may
start late or never (Pending: no node, an image pull); a failed Job's reason and message are the Job controller's, and
the JobSet's failurePolicy rules are matched against them in order.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from conftest import REPO, losses, moekit
from moekit.base import failures
from moekit.commands import render as render_cmd

pytestmark = pytest.mark.integration

GOLDEN = REPO / "k8s" / "smoke_2node.yaml"
BIN = Path(sys.executable).parent


def image_entrypoint() -> list[str]:
    """The Dockerfile's exec-form ENTRYPOINT, with the image's /opt/moekit mapped to this checkout."""
    line = next(x for x in (REPO / "Dockerfile").read_text().splitlines() if x.startswith("ENTRYPOINT"))
    return [a.replace("/opt/moekit", str(REPO)) for a in json.loads(line.removeprefix("ENTRYPOINT").strip())]


# ---------- what the controllers and the kubelet do (an independent reading of the Kubernetes rules) ----------


@dataclass
class Pod:
    name: str
    hostname: str
    fqdn: str
    index: int
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    """(source: 'claim:<name>' or a host path, mount path, read-only) of every persistent volume."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: defined names are replaced, $$ is a literal $, others stay as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2 : end]
            out.append(env.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def field_ref(pod: Pod, path: str, namespace: str) -> str:
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        source = pod.labels if m.group(1) == "labels" else pod.annotations
        assert m.group(2) in source, f"fieldRef {path}: the pod has no such {m.group(1)[:-1]}"
        return source[m.group(2)]
    simple = {"metadata.name": pod.name, "metadata.namespace": namespace, "status.podIP": "127.0.0.1"}
    assert path in simple, f"the emulator does not know fieldRef {path}"
    return simple[path]


def materialize(manifest: dict, restarts: int = 0) -> list[Pod]:
    """Every pod of the JobSet with its labels, annotations, resolved env and command."""
    name, ns = manifest["metadata"]["name"], manifest["metadata"].get("namespace", "default")
    spec = manifest["spec"]
    subdomain = spec.get("network", {}).get("subdomain") or name
    co = spec.get("coordinator")
    total = sum(r.get("replicas", 1) for r in spec["replicatedJobs"])
    pods = []
    for rjob in spec["replicatedJobs"]:
        job = rjob["template"]["spec"]
        assert job.get("completionMode") == "Indexed"
        tmpl = job["template"]
        for j in range(rjob.get("replicas", 1)):
            jobset_meta = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/restart-attempt": str(restarts),
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                "jobset.sigs.k8s.io/global-replicas": str(total),
                "jobset.sigs.k8s.io/job-index": str(j),
            }
            if co:
                jobset_meta["jobset.sigs.k8s.io/coordinator"] = (
                    f"{name}-{co['replicatedJob']}-{co.get('jobIndex', 0)}-{co.get('podIndex', 0)}.{subdomain}"
                )
            for i in range(job["completions"]):
                index = {"batch.kubernetes.io/job-completion-index": str(i)}
                host = f"{name}-{rjob['name']}-{j}-{i}"
                pods.append(
                    Pod(
                        name=f"{host}-x7k2q",
                        hostname=host,
                        fqdn=f"{host}.{subdomain}",
                        index=i,
                        namespace=ns,
                        labels=tmpl.get("metadata", {}).get("labels", {}) | jobset_meta | index,
                        annotations=tmpl.get("metadata", {}).get("annotations", {}) | jobset_meta | index,
                    )
                )
                (container,) = tmpl["spec"]["containers"]
                pod = pods[-1]
                env = {"HOSTNAME": host}
                for var in container.get("env", []):
                    if "value" in var:
                        env[var["name"]] = expand(str(var["value"]), env)
                    else:
                        env[var["name"]] = field_ref(pod, var["valueFrom"]["fieldRef"]["fieldPath"], ns)
                env.setdefault("JOB_COMPLETION_INDEX", str(i))  # the Indexed Job controller's own variable
                pod.env = env
                command = container.get("command") or image_entrypoint()
                pod.command = [expand(a, env) for a in command + container.get("args", [])]
                pod.mounts = mounts(tmpl["spec"], container)
    return pods


def mounts(pod_spec: dict, container: dict) -> list[tuple[str, str, bool]]:
    """The container's volume mounts of PersistentVolumeClaims and host paths (emptyDir stays the pod's own)."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    out = []
    for m in container.get("volumeMounts", []):
        v = volumes[m["name"]]  # the API server refuses a mount of an undeclared volume
        if "persistentVolumeClaim" in v:
            source = f"claim:{v['persistentVolumeClaim']['claimName']}"
        elif "hostPath" in v:
            source = v["hostPath"]["path"]
        else:
            assert "emptyDir" in v, f"the emulator does not know volume {v}"
            continue
        out.append((source, m["mountPath"], bool(m.get("readOnly"))))
    return out


class Network:
    """One private network namespace (loopback up) that every pod joins, like a pod network."""

    LO_UP = (
        "import fcntl, socket, struct, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "fcntl.ioctl(s, 0x8914, struct.pack('16sH14s', b'lo', 0x1 | 0x8 | 0x40, bytes(14)))  # SIOCSIFFLAGS up\n"
        "print('up', flush=True)\n"
        "time.sleep(3600)\n"
    )

    def __enter__(self) -> Network:
        self.holder = subprocess.Popen(
            ["unshare", "--net", sys.executable, "-c", self.LO_UP], stdout=subprocess.PIPE, text=True
        )
        if self.holder.stdout.readline().strip() != "up":
            self.holder.kill()
            pytest.skip("cannot create a network namespace here (needs root or user namespaces)")
        return self

    def __exit__(self, *exc) -> None:
        self.holder.kill()
        self.holder.wait()

    def start(self, pod: Pod, workdir: Path, fqdns: list[str], claims: dict[str, Path]) -> subprocess.Popen:
        """The pod's container: own PID, mount and UTS namespaces, /etc/hosts, hostname, volumes, working directory.

        claims: PersistentVolumeClaim name -> the host folder that stands for its volume.
        """
        workdir.mkdir(parents=True)
        hosts = workdir / "etc-hosts"
        # The kubelet's /etc/hosts names the pod itself (gloo resolves its own hostname); the other entries stand
        # for the cluster DNS answering for the headless service of the JobSet.
        own = f"127.0.0.1 {pod.fqdn}.{pod.namespace}.svc.cluster.local {pod.hostname}\n"
        hosts.write_text("127.0.0.1 localhost\n" + own + "".join(f"127.0.0.1 {fqdn}\n" for fqdn in fqdns))
        setup = f"mount --bind {hosts} /etc/hosts && hostname {pod.hostname} && "
        if pod.mounts:
            setup += "mount -t tmpfs tmpfs /mnt && "
        for source, target, read_only in pod.mounts:
            assert target.startswith("/mnt/"), f"the emulator mounts volumes under /mnt only, not at {target}"
            host = claims[source.removeprefix("claim:")] if source.startswith("claim:") else Path(source)
            setup += f"mkdir -p {target} && mount --bind {host} {target} && "
            setup += f"mount -o remount,bind,ro {target} && " if read_only else ""
        setup += 'exec "$@"'
        env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir)} | pod.env
        return subprocess.Popen(
            ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "unshare", "--mount", "--uts", "--pid", "--fork"]
            + ["--kill-child", "--propagation", "private", "sh", "-c", setup, "pod", *pod.command],
            cwd=workdir,
            env=env,
            stdout=open(workdir / "pod.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@dataclass
class Outcome:
    codes: list[int | None]
    """Exit codes of the last attempt's pods (negative: killed by that signal)."""
    jobset: str  # Completed | Failed | TimedOut
    seconds: float
    restarts: int = 0
    counted: int = 0
    """Restarts that spent failurePolicy.maxRestarts (a rule may restart without spending one)."""
    grace_used_s: list[float] = field(default_factory=list)
    """Per eviction: seconds from SIGTERM to the evicted pod's exit."""


Lose = Callable[[int, float], bool]
"""(restart attempt, seconds since the attempt started) -> whether the pod's node is lost now."""


def container_pid1(pod_proc: subprocess.Popen) -> int:
    """The container's PID 1 (what the kubelet signals): the child that `unshare --fork` made."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pod_proc.pid}/task/{pod_proc.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("the pod has no container process")


def delete_pod(pod_proc: subprocess.Popen, grace_s: float) -> float:
    """Delete a pod the way the kubelet does: SIGTERM to PID 1, SIGKILL after the grace period. Returns the
    seconds it took to exit."""
    begun = time.monotonic()
    if pod_proc.poll() is None:
        os.kill(container_pid1(pod_proc), signal.SIGTERM)
        try:
            pod_proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(pod_proc.pid, signal.SIGKILL)
            pod_proc.wait()
    return time.monotonic() - begun


def job_failure(manifest: dict, pod: Pod, exit_code: int | None, disrupted: bool) -> tuple[str, str]:
    """(reason, message) of the Job that the pod failed, as the Job controller writes them: the first podFailurePolicy
    rule that matches (FailJob: reason PodFailurePolicy), else backoffLimit 0 is exceeded."""
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    where = f"{pod.namespace}/{pod.name}"
    for i, rule in enumerate(job.get("podFailurePolicy", {}).get("rules", [])):
        on_codes = rule.get("onExitCodes")
        if on_codes and not disrupted and exit_code is not None and exit_code >= 0:
            named = on_codes.get("containerName") in (None, container["name"])
            hit = (exit_code in on_codes["values"]) == (on_codes["operator"] == "In")
            if named and hit and rule["action"] == "FailJob":
                return "PodFailurePolicy", (
                    f"Container {container['name']} for pod {where} failed with exit code {exit_code} "
                    f"matching FailJob rule at index {i}"
                )
        conditions = rule.get("onPodConditions", [])
        if disrupted and {"type": "DisruptionTarget", "status": "True"} in conditions and rule["action"] == "FailJob":
            return "PodFailurePolicy", f"Pod {where} has condition DisruptionTarget matching FailJob rule at index {i}"
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(manifest: dict, reason: str, message: str) -> str:
    """The JobSet failurePolicy's action for a failed Job: its first rule whose reasons and message patterns match,
    else RestartJobSet (which spends maxRestarts)."""
    for rule in manifest["spec"]["failurePolicy"].get("rules", []):
        reasons, patterns = rule.get("onJobFailureReasons"), rule.get("onJobFailureMessagePatterns")
        if reasons and reason not in reasons:
            continue
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return rule["action"]
    return "RestartJobSet"


def run_jobset(
    manifest: dict,
    workdir: Path,
    timeout_s: float,
    lose: dict[int, Lose] | None = None,
    controller: bool = True,
    claims: dict[str, Path] | None = None,
    evict: dict[int, Lose] | None = None,
    late: dict[int, float] | None = None,
) -> Outcome:
    """Run the JobSet; pods of attempt N live in workdir/attempt<N>/<hostname>.

    A failed pod fails its Job (backoffLimit: 0, or a podFailurePolicy rule); the JobSet controller then applies the
    first failurePolicy rule that matches the Job's failure (FailJobSet, RestartJobSet...AndIgnoreMaxRestarts),
    else restarts the set while restarts < maxRestarts: with restartStrategy BlockingRecreate it deletes every pod and
    creates the next attempt's once they are gone (as here), else the JobSet has Failed. Without `controller`,
    survivors are left alone: they must end by themselves.
    lose: pod index -> when that pod's node is lost (its processes killed).
    claims: PersistentVolumeClaim name -> host folder of its volume (kept across restarts).
    evict: pod index -> when that pod is preempted (deleted gracefully, with the DisruptionTarget condition).
    late: pod index -> seconds that pod stays Pending (unscheduled, its image pulling) after the others start;
    math.inf: it never starts.
    """
    assert manifest["spec"]["failurePolicy"].get("restartStrategy") == "BlockingRecreate"  # what is emulated
    max_restarts = manifest["spec"]["failurePolicy"]["maxRestarts"] if controller else 0
    grace = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].get(
        "terminationGracePeriodSeconds",
        30,  # the Kubernetes default
    )
    start, restarts, counted, used = time.monotonic(), 0, 0, []
    with Network() as net:
        while True:
            pods = materialize(manifest, restarts)
            folder = workdir / f"attempt{restarts}"
            codes, state, failed = _attempt(
                net,
                pods,
                folder,
                start + timeout_s,
                lose or {},
                controller,
                restarts,
                claims,
                evict or {},
                grace,
                used,
                late or {},
            )
            if state not in ("Failed", "Evicted") or failed is None:
                break
            reason, message = job_failure(manifest, pods[failed], codes[failed], state == "Evicted")
            action = jobset_action(manifest, reason, message) if controller else "FailJobSet"
            state = "Failed"
            if action == "FailJobSet" or (action == "RestartJobSet" and counted >= max_restarts):
                break
            restarts += 1
            counted += 1 if action == "RestartJobSet" else 0
    return Outcome(codes, state, time.monotonic() - start, restarts, counted, used)


def _attempt(
    net: Network,
    pods: list[Pod],
    folder: Path,
    deadline: float,
    lose: dict[int, Lose],
    controller: bool,
    restarts: int,
    claims: dict[str, Path] | None,
    evict: dict[int, Lose] | None = None,
    grace_s: float = 30,
    grace_used: list[float] | None = None,
    late: dict[int, float] | None = None,
) -> tuple[list[int | None], str, int | None]:
    """One attempt's pods until they end; (exit codes, state, index of the pod whose failure ended the attempt)."""
    begun = time.monotonic()
    fqdns = [q.fqdn for q in pods]
    procs: list[subprocess.Popen | None] = [None] * len(pods)

    def start_due() -> None:
        for i, p in enumerate(pods):
            if procs[i] is None and time.monotonic() - begun >= (late or {}).get(i, 0):
                procs[i] = net.start(p, folder / p.hostname, fqdns, claims or {})

    start_due()
    state, failed = "Running", None
    while state == "Running":
        time.sleep(0.5)
        start_due()
        for i, when in lose.items():
            if procs[i] is not None and procs[i].poll() is None and when(restarts, time.monotonic() - begun):
                os.killpg(procs[i].pid, signal.SIGKILL)
        for i, when in (evict or {}).items():
            if procs[i] is not None and procs[i].poll() is None and when(restarts, time.monotonic() - begun):
                took = delete_pod(procs[i], grace_s)
                (grace_used if grace_used is not None else []).append(took)
                # The JobSet restart deletes every other pod of the group, gracefully too.
                for j, other in enumerate(procs):
                    if j != i and other is not None:
                        delete_pod(other, grace_s)
                state, failed = "Evicted", i
        if state == "Evicted":
            break
        codes = [p.poll() if p is not None else None for p in procs]
        bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
        if all(c is not None for c in codes):
            state = "Completed" if not bad else "Failed"
        elif controller and bad:
            state = "Failed"
        elif time.monotonic() > deadline:
            state = "TimedOut"
        if bad and failed is None:
            failed = bad[0]
    for p in procs:  # pod deletion: the PID namespace goes, and every process in it (a pending pod never started)
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        if p is not None:
            p.wait(timeout=30)
    return [p.returncode if p is not None else None for p in procs], state, failed


# ---------- the tests ----------


def _needs_namespaces() -> None:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("the pod emulation needs root with unshare and nsenter (util-linux)")


def _run_dir(log: Path) -> Path:
    """The run directory a pod reported, as a path here (relative ones are inside the pod's working directory)."""
    lines = [s for s in log.read_text().splitlines() if s.startswith("moekit: run directory ")]
    assert lines, log.read_text()[-3000:]
    return log.parent / lines[-1].removeprefix("moekit: run directory ").strip()


def test_pod_env_is_materialized_from_the_manifest():
    pods = materialize(yaml.safe_load(GOLDEN.read_text()))
    assert [p.env["JOB_COMPLETION_INDEX"] for p in pods] == ["0", "1"]
    assert {p.env["MOEKIT_COORDINATOR_HOST"] for p in pods} == {"smoke-workers-0-0.smoke"}
    assert pods[0].fqdn == "smoke-workers-0-0.smoke"
    assert pods[1].command[0] == str(REPO / "entrypoints" / "moekit-entrypoint")
    assert pods[1].command[1:4] == ["train", "experiment=smoke", "cluster=jobset"]
    assert expand("a-$(X)-$$(X)-$(Y)", {"X": "1"}) == "a-1-$(X)-$(Y)"


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory) -> tuple[Outcome, list[Path]]:
    """The committed 2-pod smoke JobSet, run once: its outcome and the pods' logs."""
    _needs_namespaces()
    folder = tmp_path_factory.mktemp("golden")
    out = run_jobset(yaml.safe_load(GOLDEN.read_text()), folder, timeout_s=480)
    return out, [folder / f"attempt{out.restarts}" / f"smoke-workers-0-{i}" / "pod.log" for i in (0, 1)]


def test_two_pods_train_with_identical_losses(golden_run):
    out, logs = golden_run
    assert out.jobset == "Completed", (out.codes, [log.read_text()[-2000:] for log in logs])
    assert out.restarts == 0
    first, second = _run_dir(logs[0]), _run_dir(logs[1])
    assert first.is_relative_to(logs[0].parent) and second.is_relative_to(logs[1].parent)  # own filesystems
    assert first.is_absolute() and second == second.parents[1] / "launchers" / "1"  # process 1: records apart
    a, b = losses(first), losses(second, "metrics.1.jsonl")
    assert len(a) == 10 and a == b
    assert "step 9 (10/10 done)" in logs[0].read_text()
    fabric = json.loads((first / "fabric.json").read_text())  # the fabric phase ran in the pods, before training
    assert fabric["processes"] == 2 and fabric["results"] and not fabric["problems"], fabric


@pytest.mark.soak
def test_a_restarted_jobset_resumes_from_checkpoints_on_its_volume(golden_run, tmp_path):
    """The golden's job with checkpoints every 3 steps on a PersistentVolumeClaim (cluster.output). Pod 1's node
    is lost after the checkpoint of step 3: the JobSet restarts the group, whose pods find the run directory on
    the volume and resume it. The losses are the uninterrupted golden run's."""
    ref_out, ref_logs = golden_run
    assert ref_out.jobset == "Completed"
    text, _, _ = render_cmd.render(
        [
            "experiment=smoke",
            "target=jobset",
            "cluster.nodes=2",
            "cluster.gpus_per_node=1",
            "checkpoint.every=3",
            "cluster.volumes=[{name: runs, path: /mnt/moekit-runs, claim: moekit-runs}]",
            "cluster.output=runs",
        ]
    )
    claim = tmp_path / "pvc"
    claim.mkdir()
    run = claim / "smoke"  # <volume path>/<cluster.name or experiment_name>, the same for every pod and restart

    def after_checkpoint(attempt: int, seconds: float) -> bool:
        steps = _steps_partial(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
        return attempt == 0 and (run / "smoke" / "checkpoints" / "3").is_dir() and max(steps, default=-1) >= 4

    out = run_jobset(
        yaml.safe_load(text), tmp_path / "job", 900, lose={1: after_checkpoint}, claims={"moekit-runs": claim}
    )
    logs = [tmp_path / "job" / f"attempt{out.restarts}" / f"smoke-workers-0-{i}" / "pod.log" for i in (0, 1)]
    assert out.jobset == "Completed" and out.restarts == 1, (out.codes, [log.read_text()[-3000:] for log in logs])
    assert "resuming from the checkpoint of step" in logs[0].read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["attempt"] == 2 and manifest["resumed_from_checkpoint"] >= 3
    assert manifest["attempts"][0]["failure"]["class"] == "killed"
    killed = _steps_partial(run / "attempts" / "1" / "metrics.jsonl")
    assert max(killed) >= 4  # steps past the checkpoint, run again after the restart
    for records, name in ((run, "metrics.jsonl"), (run / "launchers" / "1", "metrics.1.jsonl")):
        assert [json.loads(line)["step"] for line in (records / name).read_text().splitlines()] == list(range(10))
    reference = losses(_run_dir(ref_logs[0]))
    resumed = losses(run)
    assert max(abs(a - b) for a, b in zip(reference, resumed, strict=True)) <= 1e-3, (reference, resumed)


def _steps_partial(path: Path) -> list[int]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(int(json.loads(line)["step"]))
        except (ValueError, KeyError):
            continue
    return out


def test_a_lost_pod_ends_the_group(tmp_path):
    """Pod 1's node is lost at start. The JobSet ends the group at once, restarts it once (maxRestarts 1) and
    then fails; without a controller, pod 0 still gives up by itself after cluster.rendezvous_timeout_s."""
    _needs_namespaces()
    manifest_file = tmp_path / "jobset.yaml"
    proc = moekit(
        "render",
        "experiment=smoke",
        "target=jobset",
        "cluster.nodes=2",
        "cluster.gpus_per_node=1",
        "cluster.max_restarts=1",
        "cluster.rendezvous_timeout_s=20",
        "-o",
        str(manifest_file),
    )
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load(manifest_file.read_text())

    at_start = {1: lambda attempt, seconds: True}
    grouped = run_jobset(manifest, tmp_path / "jobset", timeout_s=120, lose=at_start)
    assert grouped.jobset == "Failed" and grouped.restarts == 1 and grouped.codes[1] == -signal.SIGKILL
    assert grouped.codes[0] == -signal.SIGKILL  # deleted with the group, not left waiting
    assert grouped.seconds < 30
    assert (tmp_path / "jobset" / "attempt1" / "smoke-workers-0-0" / "pod.log").exists()  # recreated once

    alone = run_jobset(manifest, tmp_path / "alone", timeout_s=240, lose=at_start, controller=False)
    log0 = (tmp_path / "alone" / "attempt0" / "smoke-workers-0-0" / "pod.log").read_text()
    assert alone.jobset == "Failed" and alone.codes[0] == failures.RENDEZVOUS_TIMEOUT.exit_status, log0[-3000:]
    assert "training failed" in log0, log0[-3000:]
    assert alone.seconds < 150  # start-up plus the 20 s rendezvous timeout, not the 1800 s default
    # ... and says why: the classified failure, in its output and in the run's manifest.
    assert "training failed: rendezvous timeout" in log0 and "troubleshooting.md#rendezvous-timeout" in log0
    (manifest0,) = (tmp_path / "alone" / "attempt0" / "smoke-workers-0-0").glob("outputs/*/*/manifest.json")
    assert json.loads(manifest0.read_text())["failure"]["class"] == "rendezvous_timeout"


def _fabric_only_jobset(tmp_path: Path, *overrides: str) -> dict:
    """The 2-pod smoke JobSet that runs the rendezvous and the fabric check, not MaxText (fabric.only=true)."""
    text, _, _ = render_cmd.render(
        ["experiment=smoke", "target=jobset", "cluster.nodes=2", "cluster.gpus_per_node=1", "fabric.only=true",
         *overrides]
    )  # fmt: skip
    return yaml.safe_load(text)


def test_a_late_coordinator_pod_is_waited_for(tmp_path):
    """Pod 0, the coordinator, stays Pending 30 s after pod 1 started (jax-ml/jax PR #27604: Kubernetes may start pod
    0 last). Pod 1 waits within cluster.rendezvous_timeout_s, the group joins, and nothing restarts."""
    _needs_namespaces()
    manifest = _fabric_only_jobset(tmp_path, "cluster.rendezvous_timeout_s=180")
    out = run_jobset(manifest, tmp_path / "job", timeout_s=420, late={0: 30.0})
    logs = [tmp_path / "job" / "attempt0" / p.fqdn.split(".")[0] / "pod.log" for p in materialize(manifest)]
    assert out.jobset == "Completed" and out.restarts == 0, (out.codes, [log.read_text()[-3000:] for log in logs])
    assert out.seconds > 30
    joined = (_run_dir(logs[0]) / "maxtext.log").read_text()  # process 0's own output: it waited, then joined
    assert f"{failures.JOINING} at " in joined and "(timeout 180 s)" in joined and failures.JOINED in joined, joined


def test_a_pod_that_never_starts_fails_the_jobset_instead_of_restarting_it(tmp_path):
    """Pod 1 never leaves Pending (no node fits it). Pod 0 gives up after cluster.rendezvous_timeout_s and exits with
    the rendezvous timeout's status; the podFailurePolicy fails the Job on that code and the JobSet's
    RendezvousTimeout rule fails the set: no restart recreates the same unschedulable pod (maxRestarts 2 unspent)."""
    _needs_namespaces()
    manifest = _fabric_only_jobset(tmp_path, "cluster.rendezvous_timeout_s=20", "cluster.max_restarts=2")
    out = run_jobset(manifest, tmp_path / "job", timeout_s=240, late={1: math.inf})
    pod0_dir = materialize(manifest)[0].fqdn.split(".")[0]  # the fabric-only JobSet's own name: smoke-fabric-...
    log0 = (tmp_path / "job" / "attempt0" / pod0_dir / "pod.log").read_text()
    assert out.jobset == "Failed" and out.restarts == 0 and out.counted == 0, (out.codes, log0[-3000:])
    assert out.codes == [failures.RENDEZVOUS_TIMEOUT.exit_status, None], log0[-3000:]  # pod 1 never ran
    assert "training failed: rendezvous timeout" in log0 or "rendezvous timeout" in log0, log0[-3000:]
    # The same failure under a policy without that rule would spend a restart, and recreate the pending pod.
    pod0 = materialize(manifest)[0]
    reason, message = job_failure(manifest, pod0, failures.RENDEZVOUS_TIMEOUT.exit_status, disrupted=False)
    assert jobset_action(manifest, reason, message) == "FailJobSet"
    looping = json.loads(json.dumps(manifest))
    looping["spec"]["failurePolicy"]["rules"] = [
        r for r in looping["spec"]["failurePolicy"]["rules"] if r["name"] != "RendezvousTimeout"
    ]
    assert jobset_action(looping, reason, message) == "RestartJobSet"
    # A preempted pod (DisruptionTarget) still restarts the group for free, with or without that rule.
    evicted = job_failure(manifest, pod0, None, disrupted=True)
    assert jobset_action(manifest, *evicted) == jobset_action(looping, *evicted) == "RestartJobSetAndIgnoreMaxRestarts"


@pytest.mark.soak
def test_a_preempted_pod_saves_and_the_jobset_restarts_for_free(tmp_path):
    """Pod 1 is preempted after step 4: SIGTERM to its PID 1 (moekit), which passes it on; JAX's preemption
    service has both processes save at the next step and stop. Its Job fails through the DisruptionTarget
    rule, the JobSet restarts the group without spending maxRestarts (0 here), and the pods resume from the
    preemption checkpoint: at most one step is lost."""
    _needs_namespaces()
    text, _, _ = render_cmd.render(
        [
            "experiment=smoke",
            "target=jobset",
            "cluster.nodes=2",
            "cluster.gpus_per_node=1",
            "cluster.max_restarts=0",
            "train.steps=16",
            "checkpoint.every=1000",  # past the run: the only checkpoint after step 0 is the preemption's
            "cluster.signal_grace_s=120",
            "cluster.volumes=[{name: runs, path: /mnt/moekit-runs, claim: moekit-runs}]",
            "cluster.output=runs",
        ]
    )
    manifest = yaml.safe_load(text)
    pod_spec = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["terminationGracePeriodSeconds"] == 120
    claim = tmp_path / "pvc"
    claim.mkdir()
    run = claim / "smoke"
    seen: list[int] = []

    def after_step_4(attempt: int, seconds: float) -> bool:
        steps = _steps_partial(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
        if attempt == 0 and max(steps, default=-1) >= 4:
            seen.append(max(steps))
            return True
        return False

    out = run_jobset(manifest, tmp_path / "job", 900, claims={"moekit-runs": claim}, evict={1: after_step_4})
    logs = [tmp_path / "job" / f"attempt{out.restarts}" / f"smoke-workers-0-{i}" / "pod.log" for i in (0, 1)]
    assert out.jobset == "Completed" and out.restarts == 1 and out.counted == 0, (
        out.codes,
        [log.read_text()[-3000:] for log in logs],
    )
    first = [
        json.loads((records / "manifest.json").read_text())["attempts"][0] for records in (run, run / "launchers" / "1")
    ]
    print(f"\njobset preemption: signal after step {seen[0]}; pod 1 exited {out.grace_used_s[0]:.1f} s after SIGTERM")
    for attempt in first:
        print(f"  {attempt['preemption']}")
        assert attempt["status"] == "preempted" and attempt["preemption"]["checkpoint_saved"], attempt
        assert attempt["preemption"]["steps_lost"] <= 1, attempt
    assert first[1]["preemption"]["signal"] == "moekit received SIGTERM"
    # Pod 0's worker stopped with pod 1's (JAX's preemption service) before its own SIGTERM came.
    assert first[0]["preemption"]["signal"] in ("moekit received SIGTERM", "the workers got a preemption notice")
    assert out.grace_used_s[0] < 120
    manifest0 = json.loads((run / "manifest.json").read_text())
    step = first[0]["preemption"]["checkpoint_step"]
    assert manifest0["status"] == "ok" and manifest0["resumed_from_checkpoint"] == step
    # One record per step, the step the preemption saved at included (test_preemption.py says how).
    merged = _steps_partial(run / "metrics.jsonl")
    assert merged == list(range(16)), (merged, step)
