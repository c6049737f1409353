"""deploy/k8s: every object valid against the Kubernetes API schemas (offline, with the
kubernetes-validate package), and the manifests consistent with the project: the commands parse
with the real `fastmode` parser, the config they mount loads, every deployment of the config
has an engine Deployment and Service, every upstream and the Redis URL name a Service on its
port, probes hit routes the app serves, selectors match pod labels."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from fastmode.cli import build_parser
from gateway.config import load_config
from gateway.edge.app import create_app

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBE_VERSION = "1.30"


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def objects() -> list[dict]:
    """The objects kustomize would emit: the resources, and the generated ConfigMap."""
    k = kustomization()
    out = [d for f in k["resources"] for d in yaml.safe_load_all((K8S / f).read_text()) if d]
    for gen in k["configMapGenerator"]:
        data = {Path(f).name: (K8S / f).read_text() for f in gen["files"]}
        out.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": gen["name"]}, "data": data})
    return out


def by_kind(kind: str) -> list[dict]:
    return [o for o in objects() if o["kind"] == kind]


def containers(dep: dict) -> list[dict]:
    return dep["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_valid_against_the_kubernetes_schemas(obj: dict) -> None:
    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_the_validator_catches_mistakes() -> None:
    bad = copy.deepcopy(by_kind("Deployment")[0])
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)
    typo = copy.deepcopy(by_kind("Service")[0])
    typo["spec"]["selectr"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBE_VERSION, strict=True)


def test_config_is_the_compose_one_with_services_and_redis() -> None:
    k8s = tomllib.loads((K8S / "fastmode.toml").read_text())
    compose = tomllib.loads((ROOT / "deploy" / "gateway-remote.toml").read_text())
    for section in ("remote", "state"):
        k8s.pop(section, None)
        compose.pop(section, None)
    assert k8s == compose  # same physics, prices, routes as the compose topology
    cfg = load_config(K8S / "fastmode.toml")
    assert set(cfg.remote.tiers) == set(cfg.tiers) and cfg.state.redis_url


def test_manifests_match_the_project() -> None:
    services = {s["metadata"]["name"]: s for s in by_kind("Service")}
    config_map = by_kind("ConfigMap")[0]
    parser = build_parser()
    routes = {r.path for r in create_app(load_config(K8S / "fastmode.toml")).routes}
    cfg = load_config(K8S / "fastmode.toml")
    engines: dict[str, int] = {}
    for dep in by_kind("Deployment"):
        tmpl = dep["spec"]["template"]
        labels = tmpl["metadata"]["labels"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
        svc = services[dep["metadata"]["name"]]
        assert svc["spec"]["selector"].items() <= labels.items()
        for c in containers(dep):
            assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
            assert c["readinessProbe"] and c["livenessProbe"]
            if c["command"][0] != "fastmode":
                continue
            args = parser.parse_args(c["command"][1:])
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in tmpl["spec"]["volumes"]}
            mount_dir = str(Path(args.config).parent)
            assert volumes[mounts[mount_dir]]["configMap"]["name"] == config_map["metadata"][
                "name"]
            assert Path(args.config).name in config_map["data"]
            assert args.port == 8000 and c["ports"][0]["containerPort"] == 8000
            for probe in ("readinessProbe", "livenessProbe"):
                assert c[probe]["httpGet"]["path"] in routes
            if args.command == "engine":
                assert args.deployment in cfg.deployments
                engines[args.deployment] = dep["spec"]["replicas"] * (args.replicas or
                                                                      cfg.deployments[
                                                                          args.deployment
                                                                      ].replicas)
    # every deployment of the config runs, with its number of replicas in all
    assert engines == {n: d.replicas for n, d in cfg.deployments.items()}

    def names_a_service(url: str) -> bool:
        u = urlsplit(url)
        svc = services.get(u.hostname or "")
        return svc is not None and any(p["port"] == u.port for p in svc["spec"]["ports"])

    for tier in cfg.remote.tiers.values():
        assert all(names_a_service(u) for u in tier.upstreams), tier.upstreams
    redis_env = [e["value"] for d in by_kind("Deployment") for c in containers(d)
                 for e in c.get("env", []) if e["name"] == "FASTMODE_REDIS_URL"]
    assert redis_env and all(names_a_service(u.replace("redis://", "http://"))
                             for u in [cfg.state.redis_url, *redis_env])
    gateway = next(d for d in by_kind("Deployment") if d["metadata"]["name"] ==
                   "fastmode-gateway")
    assert gateway["spec"]["replicas"] >= 2


def test_engine_pods_are_selectable_by_an_inference_pool() -> None:
    """The labels an InferencePool's selector uses (docs/kubernetes.md) are on the pods."""
    for dep in by_kind("Deployment"):
        if dep["metadata"]["name"].startswith("fastmode-engine-"):
            labels = dep["spec"]["template"]["metadata"]["labels"]
            assert labels["fastmode.dev/deployment"] in load_config(
                K8S / "fastmode.toml").deployments
