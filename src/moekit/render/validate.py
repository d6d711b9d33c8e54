"""Check a rendered JobSet the way a cluster would, offline (pure apart from reading the schema files).

Three layers, each returning readable problems (empty list = valid):
- the JobSet CRD's openAPIV3Schema, with unknown fields as errors (the API server would prune them
  silently, which is how a misspelled field vanishes): the cluster's own CRD (--crd), or the structure of
  a released one that moekit ships (data/jobset-v1alpha2.schema.json, made by scripts/jobset_schema.py),
- the Kubernetes pod/job template schemas of a given API version (PyPI kubernetes-validate, strict),
- the rules the JobSet webhook and the kubelet apply: DNS-1035 names that stay within 63 characters
  once the controller derives job, pod and coordinator names from them, and $(VAR) references that
  Kubernetes can expand (defined earlier in `env`); plus moekit's own: no privileged containers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moekit.base import bounded, parse
from moekit.base.errors import MoekitError

if TYPE_CHECKING:
    import jsonschema

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
KUBERNETES_VERSION = "1.30"
MAX_INDEXED = 100_000  # the API server's limit on an Indexed Job's completions and parallelism (KEP-2214)
CRD_MAX_BYTES = 16 * 1024 * 1024  # the JobSet CRD is about 1 MB; a file far larger is not one
CRD_HINT = "export it from your cluster: kubectl get crd jobsets.jobset.x-k8s.io -o yaml > jobset-crd.yaml"
PACKAGED_SCHEMA = "data/jobset-v1alpha2.schema.json"
SOURCE_KEY = "x-moekit-source"  # where the packaged schema came from (an annotation; JSON Schema ignores it)


class ValidationSetupError(MoekitError):
    """The schema to validate against cannot be read."""


# ---- the CRD's structural schema as a strict JSON Schema ----


@functools.cache
def crd_schema(crd_path: Path, version: str = "v1alpha2") -> dict[str, Any]:
    """The openAPIV3Schema of one served version of the JobSet CRD, made strict (unknown fields rejected)."""
    try:
        docs = parse.yaml_file(crd_path, CRD_MAX_BYTES, "JobSet CRD", finite=False, every=True)
    except bounded.TooLarge as exc:
        raise ValidationSetupError(f"{str(exc).splitlines()[0]}; {CRD_HINT}") from None
    except parse.ParseError as exc:
        raise ValidationSetupError(f"{exc}; {CRD_HINT}") from None
    except OSError as exc:
        raise ValidationSetupError(
            f"cannot read the JobSet CRD at {bounded.shown(crd_path)}: {exc.strerror}; {CRD_HINT}"
        ) from None
    if not all(isinstance(d, dict) for d in docs):
        raise ValidationSetupError(f"{crd_path} is not a Kubernetes CRD (a YAML mapping per document); {CRD_HINT}")
    try:
        found = schema_from_crd(docs, version)
    except (KeyError, TypeError, AttributeError) as exc:  # a CRD-shaped document missing its spec's parts
        raise ValidationSetupError(
            f"{bounded.shown(crd_path)} is not a JobSet CRD moekit can read (no {exc} where a CRD has one); {CRD_HINT}"
        ) from None
    if found is None:
        raise ValidationSetupError(f"{crd_path} holds no JobSet CRD serving {version}; {CRD_HINT}")
    return found


def schema_from_crd(docs: list[dict[str, Any]], version: str = "v1alpha2") -> dict[str, Any] | None:
    """The strict schema of `version` from the documents of a CRD file (None: no JobSet CRD serves it)."""
    docs = docs + [item for d in docs if d.get("kind") == "List" for item in d.get("items", [])]  # kubectl -o yaml
    for doc in docs:
        if doc.get("kind") != "CustomResourceDefinition" or doc["spec"].get("group") != "jobset.x-k8s.io":
            continue
        for v in doc["spec"]["versions"]:
            if v["name"] == version:
                return _strict(v["schema"]["openAPIV3Schema"], root=True)
    return None


@functools.cache
def packaged_schema() -> dict[str, Any]:
    """The strict v1alpha2 schema moekit ships, generated from a released JobSet CRD (its source is recorded)."""
    return parse.json_text(
        resources.files("moekit").joinpath(PACKAGED_SCHEMA).read_text(encoding="utf8"), PACKAGED_SCHEMA
    )


def schema_source(schema: dict[str, Any]) -> str:
    """One line naming what a schema was generated from."""
    src = schema.get(SOURCE_KEY)
    return f"JobSet {src['jobset_version']} CRD ({src['served_version']})" if src else "the given JobSet CRD"


def _strict(node: dict[str, Any], root: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {k: _strict(v) for k, v in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _strict(value)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _strict(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_strict(v) for v in value]
        elif not key.startswith("x-kubernetes-") and key != "nullable":
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if root:
        # metadata is ObjectMeta, checked by the API server itself (names: see webhook_problems)
        out["properties"]["metadata"] = {"type": "object"}
    return out


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


# OpenAPI's number formats (Kubernetes: `format: int32` on maxRestarts, replicas, ports), which jsonschema leaves to
# the caller: a schema's format is one of its bounds, so the check applies it as the API server does.
INT_FORMATS = {"int32": 1 << 31, "int64": 1 << 63}


@functools.cache
def format_checker() -> Any:
    """jsonschema's format checker, with OpenAPI's int32, int64, float and double."""
    import math

    import jsonschema

    checker = jsonschema.FormatChecker()
    for name, bound in INT_FORMATS.items():
        checker.checks(name)(
            lambda v, bound=bound: not isinstance(v, int) or isinstance(v, bool) or -bound <= v < bound
        )
    for name in ("float", "double"):
        checker.checks(name)(lambda v: not isinstance(v, float) or math.isfinite(v))
    return checker


def crd_problems(manifest: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Where the manifest breaks the CRD's openAPIV3Schema, one line per error ('CRD: <where>: ...'); formats
    (int32, int64, ...) and every declared bound included."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema, format_checker=format_checker())
    return [f"CRD: {_where(e)}: {e.message}" for e in sorted(validator.iter_errors(manifest), key=str)]


# ---- the job/pod templates against the Kubernetes API schemas ----


@functools.cache  # the 1.30 definitions are 5 MB of JSON: parse once per process
def _kubernetes_schema(version: str) -> tuple[dict[str, Any], Any]:
    import importlib_resources
    from referencing import Registry, Resource

    root = importlib_resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    try:
        schema = parse.json_text((root / "jobtemplatespec-batch-v1.json").read_text(), "jobtemplatespec-batch-v1.json")
        defs = parse.json_text((root / "_definitions.json").read_text(), "_definitions.json")
    except FileNotFoundError:
        raise ValidationSetupError(
            f"kubernetes-validate has no schemas for Kubernetes {version}; choose another --kubernetes version"
        ) from None
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(defs) @ registry
    return schema, registry


def template_problems(manifest: dict[str, Any], version: str = KUBERNETES_VERSION) -> list[str]:
    """Each replicated job's template as a batch/v1 JobTemplateSpec of Kubernetes `version` (strict)."""
    import jsonschema

    schema, registry = _kubernetes_schema(version)
    validator = jsonschema.Draft202012Validator(schema, registry=registry, format_checker=format_checker())
    out = []
    for i, rjob in enumerate(manifest.get("spec", {}).get("replicatedJobs", [])):
        for e in sorted(validator.iter_errors(rjob.get("template", {})), key=str):
            out.append(f"Kubernetes {version}: spec.replicatedJobs.{i}.template.{_where(e)}: {e.message}")
    return out


# ---- the JobSet webhook's rules and $(VAR) references ----


def _dns1035(value: str, what: str) -> Iterator[str]:
    if len(value) > 63:
        yield f"{what} '{value}' is {len(value)} characters; the limit is 63"
    if not DNS1035.fullmatch(value):
        yield f"{what} '{value}' is not a DNS-1035 label (lower-case letters, digits, '-', starting with a letter)"


def references(text: str) -> list[str]:
    """Names in $(NAME) that Kubernetes would try to expand ($$ escapes a dollar)."""
    names, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
        elif text.startswith("$(", i) and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            names.append(text[i + 2 : end])
            i = end + 1
        else:
            i += 1
    return names


def webhook_problems(manifest: dict[str, Any]) -> list[str]:
    """What the JobSet webhook and the kubelet would refuse: names that break DNS-1035 or 63 characters once the
    controller derives job, pod and coordinator names, $(VAR) references they cannot expand, invalid failure-policy
    rules; plus moekit's: no privileged container."""
    out: list[str] = []
    name = manifest.get("metadata", {}).get("name", "")
    spec = manifest.get("spec", {})
    out += _dns1035(name, "JobSet name")
    rjobs = spec.get("replicatedJobs", [])
    names = [r.get("name", "") for r in rjobs]
    for r in rjobs:
        job = r.get("template", {}).get("spec", {})
        out += _dns1035(r.get("name", ""), "replicated job name")
        longest_job = f"{name}-{r.get('name')}-{r.get('replicas', 1) - 1}"
        out += _dns1035(longest_job, "generated Job name")
        if job.get("completionMode") == "Indexed" and job.get("completions"):
            pod = f"{longest_job}-{job['completions'] - 1}-abcde"  # the controller adds a 5-character suffix
            out += _dns1035(pod, "generated pod name")
            for field in ("completions", "parallelism"):
                if isinstance(job.get(field), int) and job[field] > MAX_INDEXED:
                    out.append(
                        f"replicated job '{r.get('name')}': {field} {job[field]:,} is more than the {MAX_INDEXED:,} "
                        "Kubernetes allows an Indexed Job (one pod per node: lower cluster.nodes)"
                    )
        pod_spec = job.get("template", {}).get("spec", {})
        out += _volume_problems(pod_spec)
        for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            out += _container_problems(c)
    co = spec.get("coordinator")
    if co:
        if co.get("replicatedJob") not in names:
            out.append(f"coordinator replicatedJob '{co.get('replicatedJob')}' does not exist")
        subdomain = spec.get("network", {}).get("subdomain") or name
        endpoint = f"{name}-{co.get('replicatedJob')}-{co.get('jobIndex', 0)}-{co.get('podIndex', 0)}.{subdomain}"
        if len(endpoint) > 63 or not LABEL_VALUE.fullmatch(endpoint):
            fits = max(1, (63 - len(endpoint) + 2 * len(name)) // 2)
            out.append(
                f"coordinator label value '{endpoint}' ({len(endpoint)} characters) is not a valid label value "
                f"(<= 63); shorten the JobSet name (cluster.name) to at most {fits} characters"
            )
    seen: set[str] = set()
    for rule in spec.get("failurePolicy", {}).get("rules", []):
        rname = rule.get("name", "")
        if not RULE_NAME.fullmatch(rname) or len(rname) > 128:
            out.append(f"failure policy rule name '{rname}' is invalid")
        if rname in seen:
            out.append(f"failure policy rule name '{rname}' is not unique")
        seen.add(rname)
        out += [
            f"failure policy rule '{rname}': unknown job failure reason '{r}'"
            for r in rule.get("onJobFailureReasons", [])
            if r not in JOB_FAILURE_REASONS
        ]
        out += [
            f"failure policy rule '{rname}': unknown replicated job '{t}'"
            for t in rule.get("targetReplicatedJobs", [])
            if t not in names
        ]
    return out


def _backsteps(path: Any) -> bool:
    """Whether a path has a '..' part, which the API server refuses in a hostPath and a subPath."""
    return isinstance(path, str) and ".." in path.replace("\\", "/").split("/")


def _volume_problems(pod_spec: dict[str, Any]) -> list[str]:
    """What the API server's pod validation refuses in volumes and mounts: '..' in a hostPath or a subPath, an
    absolute subPath."""
    out = []
    for v in pod_spec.get("volumes", []):
        path = (v.get("hostPath") or {}).get("path")
        if _backsteps(path):
            out.append(f"volume '{v.get('name')}': hostPath {path!r} holds '..', which Kubernetes refuses; give the "
                       "host folder as an absolute path without '..'")  # fmt: skip
    for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            sub = m.get("subPath")
            if _backsteps(sub) or (isinstance(sub, str) and sub.startswith("/")):
                out.append(f"container '{c.get('name')}': volumeMount subPath {sub!r} must be a relative path "
                           "without '..'")  # fmt: skip
    return out


def _container_problems(container: dict[str, Any]) -> list[str]:
    out, defined = [], []
    where = f"container '{container.get('name')}'"
    if container.get("securityContext", {}).get("privileged"):
        # moekit's own rule, not the cluster's: RDMA needs IPC_LOCK and device plugins, never the whole host
        out.append(f"{where}: privileged containers are refused; add capabilities (IPC_LOCK) instead")
    for var in container.get("env", []):
        for ref in references(str(var.get("value", ""))):
            if ref not in defined:
                out.append(f"{where}: env {var['name']} refers to $({ref}), which is not defined earlier in env")
        if var["name"] in defined:
            out.append(f"{where}: env {var['name']} is defined twice (the later value silently wins)")
        defined.append(var["name"])
    for field in ("command", "args"):
        for arg in container.get(field, []):
            out += [
                f"{where}: {field} refers to $({ref}), which env does not define"
                for ref in references(str(arg))
                if ref not in defined
            ]
    return out


def problems(manifest: dict[str, Any], crd_path: Path | None = None, kubernetes: str = KUBERNETES_VERSION) -> list[str]:
    """Every problem a cluster would report for this JobSet (empty list = it would be admitted).

    crd_path: the cluster's JobSet CRD; None checks against the schema moekit ships.
    """
    schema = crd_schema(Path(crd_path)) if crd_path else packaged_schema()
    return crd_problems(manifest, schema) + template_problems(manifest, kubernetes) + webhook_problems(manifest)
