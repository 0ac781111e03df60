"""Kubernetes and KServe manifests (deploy/kubernetes, deploy/kserve), checked offline.

Every resource is validated against the Kubernetes OpenAPI schemas that PyPI's
kubernetes-validate ships, in their strict form (an unknown or misspelt key fails), for the
oldest version the manifests need (1.27: gRPC probes are GA) and the newest the package has.
The kustomize overlays are rendered by a small strategic merge written here (the subset the
overlays use) and, where `kubectl` is installed, by `kubectl kustomize` too, which must agree.
KServe's resources are checked against the parts of KServe's CRD schemas they use
(kserve_crd_schemas.json, pruned from the CRDs by scripts/prune_kserve_crds.py).
"""
import copy
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
KSERVE = ROOT / "deploy" / "kserve"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
VERSIONS = ["1.27", "1.37"]
KIND_ORDER = ["ConfigMap", "PersistentVolumeClaim", "Service", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget"]


def load_all(path):
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


@functools.lru_cache(maxsize=None)
def validator(api_version, kind, version):
    """kubernetes_validate.validate's strict schema for one kind, built once: the package reads
    and links its 2 MB of definitions again on every call."""
    from kubernetes_validate import utils
    from referencing import Registry, Resource
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}.0-local-strict"
    schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", version)
    definitions = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate(resource, version):
    """Raises jsonschema.ValidationError when the resource breaks Kubernetes' strict schema."""
    validator(resource["apiVersion"], resource["kind"], version).validate(resource)


def test_cached_validator_is_kubernetes_validate():
    """The cache above gives kubernetes-validate's own verdicts."""
    deployment = load_all(K8S / "base" / "deployment.yaml")[0]
    kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)
    validate(deployment, VERSIONS[-1])
    bad = copy.deepcopy(deployment)
    bad["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    with pytest.raises(jsonschema.ValidationError):
        validate(bad, VERSIONS[-1])


# --- a kustomize subset: resources (files or folders with a kustomization) and patches ---

def strategic_merge(base, patch):
    """Kubernetes' strategic merge patch, as far as the overlays use it: maps merge key by key,
    lists of named objects (containers, volumes, ports) merge by name, other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(x, dict) and "name" in x for x in base + patch):
        out = [dict(x) for x in base]
        for item in patch:
            i = next((i for i, x in enumerate(out) if x["name"] == item["name"]), None)
            if i is None:
                out.append(item)
            else:
                out[i] = strategic_merge(out[i], item)
        return out
    return copy.deepcopy(patch)


def render(folder):
    folder = Path(folder)
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    allowed = {"apiVersion", "kind", "resources", "patches"}
    assert set(kustomization) <= allowed, f"{folder}: this renderer knows only {allowed}"
    resources = []
    for entry in kustomization.get("resources", []):
        path = folder / entry
        resources += render(path) if path.is_dir() else load_all(path)
    for entry in kustomization.get("patches", []):
        assert set(entry) == {"path"}, "only file patches"
        for patch in load_all(folder / entry["path"]):
            key = (patch["apiVersion"], patch["kind"], patch["metadata"]["name"])
            matches = [i for i, r in enumerate(resources) if (r["apiVersion"], r["kind"], r["metadata"]["name"]) == key]
            assert len(matches) == 1, f"patch {entry['path']} matches {len(matches)} resources"
            resources[matches[0]] = strategic_merge(resources[matches[0]], patch)
    return resources


def by_kind(resources):
    return sorted(resources, key=lambda r: (KIND_ORDER.index(r["kind"]) if r["kind"] in KIND_ORDER else 99, r["metadata"]["name"]))


def one(resources, kind):
    found = [r for r in resources if r["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


BASE_FILES = sorted(p for p in (K8S / "base").glob("*.yaml") if p.name != "kustomization.yaml")
RENDERS = {"base": lambda: render(K8S / "base"), **{o: (lambda o=o: render(K8S / "overlays" / o)) for o in OVERLAYS}}


def test_overlays_exist():
    assert OVERLAYS == ["large", "small"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", BASE_FILES, ids=lambda p: p.name)
def test_base_files_validate(path, version):
    for resource in load_all(path):
        validate(resource, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(RENDERS))
def test_rendered_resources_validate(name, version):
    resources = RENDERS[name]()
    assert {r["kind"] for r in resources} == set(KIND_ORDER)
    for resource in resources:
        validate(resource, version)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the overlays are rendered by this file's merge only")
@pytest.mark.parametrize("name", list(RENDERS))
def test_kubectl_kustomize_agrees(name):
    folder = K8S / "base" if name == "base" else K8S / "overlays" / name
    out = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert by_kind(load_all_text(out.stdout)) == by_kind(RENDERS[name]())


def load_all_text(text):
    return [d for d in yaml.safe_load_all(text) if d]


def test_validation_is_not_vacuous():
    """A misspelt key, a wrong type and a missing required field each fail the schema check."""
    deployment = one(render(K8S / "base"), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = container["readinessProbe"]
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "45"
    missing = copy.deepcopy(deployment)
    del missing["spec"]["selector"]
    for resource in (bad, wrong_type, missing):
        with pytest.raises(jsonschema.ValidationError):
            validate(resource, VERSIONS[-1])


def config_of(resources):
    return json.loads(one(resources, "ConfigMap")["data"]["config.json"])


def cpus(quantity):
    q = str(quantity)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


@pytest.mark.parametrize("name", list(RENDERS))
def test_deployment_probes_security_and_drain(name):
    resources = RENDERS[name]()
    deployment = one(resources, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Kubernetes' native gRPC probes against grpc.health.v1 on the gRPC port.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 8001, probe
    # Non-root, read-only root file system, no privilege, as the image's numeric user.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == image_uid()
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True and mounts["models"]["mountPath"] == "/models"
    assert container["args"][:3] == ["serve", "--models", "/models"]
    # The grace period covers the preStop wait, the drain, and a margin to exit.
    config = config_of(resources)
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + config["drainTimeout"] + 5
    # Zero failed requests in a rollout: no old pod goes before a new one is ready.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # The server listens where the probes and the Service look.
    assert config["host"] == "0.0.0.0" and config["port"] == 8001 and config["metricsPort"] == 8002 and config["httpPort"] == 8000
    assert {p["containerPort"] for p in container["ports"]} == {8000, 8001, 8002}


@pytest.mark.parametrize("name", list(RENDERS))
def test_threads_fit_the_cpu_limit(name):
    """One loop thread plus workers × model threads fit in the pod's CPUs (docs/deploy.md)."""
    resources = RENDERS[name]()
    container = one(resources, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    limit = cpus(container["resources"]["limits"]["cpu"])
    assert container["resources"]["requests"] == container["resources"]["limits"], "Guaranteed QoS"
    config = config_of(resources)
    assert config["workers"] >= 1 and config["modelThreads"] >= 1
    assert 1 + config["workers"] * config["modelThreads"] <= limit


def test_overlays_differ_in_size():
    limits = {o: cpus(one(RENDERS[o](), "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"]) for o in OVERLAYS}
    assert limits["small"] < cpus(4) < limits["large"]


@pytest.mark.parametrize("name", list(RENDERS))
def test_service_hpa_and_pdb_point_at_the_pods(name):
    resources = RENDERS[name]()
    deployment = one(resources, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = one(resources, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: p for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    assert one(resources, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = one(resources, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == one(resources, "PersistentVolumeClaim")["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == one(resources, "ConfigMap")["metadata"]["name"]


def image_uid():
    user = re.search(r"^USER (\d+)", (ROOT / "deploy" / "container" / "Containerfile").read_text(), re.M)
    return int(user.group(1))


# --- KServe ---

KSERVE_SCHEMAS = json.loads((Path(__file__).parent / "kserve_crd_schemas.json").read_text())["kinds"]
KSERVE_RESOURCES = [r for f in sorted(KSERVE.glob("*.yaml")) for r in load_all(f)]


def check_kserve(resource):
    entry = KSERVE_SCHEMAS[resource["kind"]]
    assert resource["apiVersion"] == entry["apiVersion"] and entry["served"]
    jsonschema.Draft7Validator(entry["schema"]).validate(resource)


@pytest.mark.parametrize("resource", KSERVE_RESOURCES, ids=lambda r: r["kind"])
def test_kserve_resources_match_the_crds(resource):
    check_kserve(resource)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", resource["metadata"]["name"])


def test_kserve_schema_check_is_not_vacuous():
    runtime = copy.deepcopy(one(KSERVE_RESOURCES, "ServingRuntime"))
    runtime["spec"]["supportedModelFormat"] = runtime["spec"].pop("supportedModelFormats")
    isvc = copy.deepcopy(one(KSERVE_RESOURCES, "InferenceService"))
    isvc["spec"]["predictor"]["model"]["modelFormat"] = {"version": "1"}  # name is required
    priority = copy.deepcopy(one(KSERVE_RESOURCES, "ServingRuntime"))
    priority["spec"]["supportedModelFormats"][0]["priority"] = 0  # minimum 1
    for resource in (runtime, isvc, priority):
        with pytest.raises(jsonschema.ValidationError):
            check_kserve(resource)


@pytest.mark.parametrize("version", VERSIONS)
def test_serving_runtime_containers_are_kubernetes_containers(version):
    """The CRD embeds core/v1 Container: check it against Kubernetes' own strict schema too."""
    for container in one(KSERVE_RESOURCES, "ServingRuntime")["spec"]["containers"]:
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": {"containers": [container]}}, version)


def test_serving_runtime_declares_coreml_over_grpc_v2():
    runtime = one(KSERVE_RESOURCES, "ServingRuntime")
    spec = runtime["spec"]
    assert [f["name"] for f in spec["supportedModelFormats"]] == ["coreml"]
    assert spec["protocolVersions"] == ["grpc-v2"]
    (container,) = spec["containers"]
    args = container["args"]
    assert args[args.index("--models") + 1] == "/mnt/models", "KServe's storage initializer writes to /mnt/models"
    assert args[args.index("--host") + 1] == "0.0.0.0"
    (port,) = container["ports"]
    assert port["name"] == "h2c" and port["containerPort"] == int(args[args.index("--port") + 1])
    assert container["readinessProbe"]["grpc"]["port"] == port["containerPort"]
    assert int(args[args.index("--drain-timeout") + 1]) < 30, "KServe's default termination grace period"
    assert container["securityContext"]["runAsUser"] == image_uid()


def test_inference_service_uses_the_runtime_and_storage_conventions():
    runtime = one(KSERVE_RESOURCES, "ServingRuntime")
    model = one(KSERVE_RESOURCES, "InferenceService")["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in [f["name"] for f in runtime["spec"]["supportedModelFormats"]]
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert re.match(r"(pvc|gs|s3|https|hf)://", model["storageUri"])
