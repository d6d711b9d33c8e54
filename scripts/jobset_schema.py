#!/usr/bin/env python3
"""Write the JobSet v1alpha2 schema that `moekit render --check` uses when no --crd is given.

Reads a released JobSet CRD (the `manifests.yaml` of a JobSet release, or `kubectl get crd
jobsets.jobset.x-k8s.io -o yaml`), keeps the structure of its v1alpha2 openAPIV3Schema made strict the way
--crd does (moekit.render.validate.schema_from_crd: unknown fields are errors), drops every description
and records where it came from. Run it again when moving to a newer JobSet release:

    .venv/bin/python scripts/jobset_schema.py jobset-crd.yaml --jobset-version v0.12.0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from moekit.render.validate import PACKAGED_SCHEMA, SOURCE_KEY, schema_from_crd

OUT = Path(__file__).resolve().parents[1] / "src" / "moekit" / PACKAGED_SCHEMA
SERVED = "v1alpha2"


def structure(node: Any, fields: bool = False) -> Any:
    """The schema without its prose (every `description`); `fields`: node maps field names to schemas."""
    if isinstance(node, dict):
        if fields:
            return {k: structure(v) for k, v in node.items()}
        return {k: structure(v, fields=k == "properties") for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [structure(v) for v in node]
    return node


def generate(crd_text: str, jobset_version: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(crd_text) if d]
    schema = schema_from_crd(docs, SERVED)
    if schema is None:
        raise SystemExit(f"the file holds no JobSet CRD serving {SERVED}")
    source = {
        "crd": "jobsets.jobset.x-k8s.io",
        "jobset_version": jobset_version,
        "served_version": SERVED,
        "crd_sha256": hashlib.sha256(crd_text.encode()).hexdigest(),
        "generated_by": "scripts/jobset_schema.py",
    }
    return {SOURCE_KEY: source, **structure(schema)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("crd", type=Path, help="the JobSet CRD YAML of a release")
    p.add_argument("--jobset-version", required=True, help="the JobSet release it comes from, e.g. v0.12.0")
    p.add_argument("--out", type=Path, default=OUT, help=f"default {OUT}")
    args = p.parse_args(argv)
    schema = generate(args.crd.read_text(encoding="utf8"), args.jobset_version)
    args.out.write_text(json.dumps(schema, sort_keys=True, indent=0) + "\n", encoding="utf8")
    print(
        f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB) from JobSet {args.jobset_version}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
