#!/usr/bin/env python3
"""Writes Tests/Deploy/kserve_crd_schemas.json: the parts of KServe's CRD schemas that
deploy/kserve/*.yaml use, so the tests check those manifests offline.

    python scripts/prune_kserve_crds.py KSERVE_CHECKOUT [COMMIT]

KSERVE_CHECKOUT is a checkout of KServe's repository (config/crd/full/ holds the CRDs, each
over 100 KB, the InferenceService's 2 MB). For every object a manifest uses, the pruned schema
keeps the CRD's types, enums, patterns and required fields of the keys the manifest sets, and
the names of all the keys the CRD allows (propertyNames), so a misspelt key fails while a key
the manifest does not use yet passes unchecked below its name: rerun this after adding one.
"""
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRDS = {
    "ServingRuntime": "serving.kserve.io_servingruntimes.yaml",
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
}
DROP = {"description", "properties", "items", "additionalProperties"}


def merged(values):
    """One instance holding every key of every list item (a schema for the union of their uses)."""
    out = None
    for v in values:
        if isinstance(v, dict):
            out = out if isinstance(out, dict) else {}
            for k, x in v.items():
                out[k] = merged([out[k], x]) if k in out else x
        elif isinstance(v, list):
            out = (out if isinstance(out, list) else []) + v
        else:
            out = v
    return out


def prune(schema, inst):
    s = {k: v for k, v in schema.items() if k not in DROP}
    if isinstance(inst, dict) and "properties" in schema:
        s["properties"] = {k: prune(schema["properties"][k], v) for k, v in inst.items() if k in schema["properties"]}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            s["propertyNames"] = {"enum": sorted(schema["properties"])}
    elif isinstance(inst, dict) and isinstance(schema.get("additionalProperties"), dict):
        s["additionalProperties"] = prune(schema["additionalProperties"], merged(list(inst.values())))
    if isinstance(inst, list) and "items" in schema:
        s["items"] = prune(schema["items"], merged(inst))
    return s


def main():
    checkout = Path(sys.argv[1])
    commit = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    manifests = [d for f in sorted((ROOT / "deploy" / "kserve").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    out = {"source": f"KServe config/crd/full at commit {commit}, pruned by scripts/prune_kserve_crds.py", "kinds": {}}
    for kind, name in CRDS.items():
        crd = yaml.safe_load((checkout / "config" / "crd" / "full" / name).read_text())
        uses = [m for m in manifests if m["kind"] == kind]
        for version in crd["spec"]["versions"]:
            api = f"{crd['spec']['group']}/{version['name']}"
            mine = [m for m in uses if m["apiVersion"] == api]
            if mine:
                out["kinds"][kind] = {"apiVersion": api, "served": version.get("served", False),
                                      "schema": prune(version["schema"]["openAPIV3Schema"], merged(mine))}
    (ROOT / "Tests" / "Deploy" / "kserve_crd_schemas.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
