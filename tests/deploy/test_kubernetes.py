"""deploy/: every object of every kustomization (deploy/k8s, the gateway and its engines;
deploy/k8s-pd, a P/D pool with LoRA adapters) valid against the Kubernetes API schemas (offline,
with the kubernetes-validate package), and the manifests consistent with the project: the
commands parse with the real `fastmode` parser, the config they mount loads, every deployment of
the config has an engine Deployment and Service, every upstream and the Redis URL name a Service
on its port, probes hit routes the app serves, selectors match pod labels, every KV-event socket
an engine binds is a port of its pod and its Service."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config
from fastmode.gateway.engine_config import engine_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
PD = ROOT / "deploy" / "k8s-pd"
KUSTOMIZATIONS = (K8S, PD)
KUBE_VERSION = "1.30"


def kustomization(where: Path = K8S) -> dict:
    return yaml.safe_load((where / "kustomization.yaml").read_text())


def objects(where: Path = K8S) -> list[dict]:
    """The objects kustomize would emit: the resources, and the generated ConfigMap."""
    k = kustomization(where)
    out = [d for f in k["resources"] for d in yaml.safe_load_all((where / f).read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        data = {Path(f).name: (where / f).read_text() for f in gen["files"]}
        out.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": gen["name"]}, "data": data})
    return out


def every_object() -> list[dict]:
    return [o for where in KUSTOMIZATIONS for o in objects(where)]


def by_kind(kind: str) -> list[dict]:
    return [o for o in objects() if o["kind"] == kind]


def containers(dep: dict) -> list[dict]:
    return dep["spec"]["template"]["spec"]["containers"]


def test_every_kustomization_of_deploy_is_checked() -> None:
    found = {p.parent for p in (ROOT / "deploy").rglob("kustomization.yaml")}
    assert found == set(KUSTOMIZATIONS)


@pytest.mark.parametrize("obj", every_object(),
                         ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
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


def engine_containers(where: Path) -> list[tuple[dict, dict, dict]]:
    """(Deployment, container, its Service) of every fastmode engine of a kustomization."""
    services = {s["metadata"]["name"]: s for s in objects(where) if s["kind"] == "Service"}
    return [(d, c, services[d["metadata"]["name"]])
            for d in objects(where) if d["kind"] == "Deployment"
            for c in containers(d) if c["command"][:2] == ["fastmode", "engine"]]


@pytest.mark.parametrize("where", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kv_event_sockets_are_ports_of_the_pod_and_its_service(where: Path) -> None:
    """A KV-aware router subscribes to each pod's PUB socket and asks its replay socket: both
    ports bound by --kv-events-config are container ports and Service ports."""
    checked = 0
    for _, c, svc in engine_containers(where):
        args, _ = build_parser().parse_known_args(c["command"][1:])
        if args.kv_events_config is None:
            continue
        events = json.loads(args.kv_events_config)
        assert events["enable_kv_cache_events"] and events["publisher"] == "zmq"
        pod = {p["containerPort"] for p in c["ports"]}
        served = {p["port"] for p in svc["spec"]["ports"]}
        for key in ("endpoint", "replay_endpoint"):
            port = int(events[key].rsplit(":", 1)[1])
            assert port in pod and port in served, (key, port)
        checked += 1
    assert checked


def test_pd_pool_engines_start_with_their_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/k8s-pd's commands, with their environment, make engines with the NIXL connector,
    the two adapters listed under the served name, run-time loading on and the NIXL side
    channel's port exposed; prefill and decode pods differ only in their role label."""
    pods = engine_containers(PD)
    assert {d["metadata"]["labels"]["llm-d.ai/role"] for d, _, _ in pods} == {"prefill",
                                                                            "decode"}
    assert len({tuple(c["command"]) for _, c, _ in pods}) == 1
    for _, c, svc in pods:
        args, extra = build_parser().parse_known_args(c["command"][1:])
        assert extra == []  # every flag is one fastmode reads
        for e in c.get("env", []):
            monkeypatch.setenv(e["name"], e["value"])
        cfg = engine_config(apply_flags(load_config(args.config), args), args.deployment,
                            args.replicas, args.served_model_name)
        dep = cfg.deployments[args.deployment]
        assert dep.kv_transfer is not None and dep.kv_transfer.on
        assert dep.lora is not None and dep.lora.runtime_updating
        assert [m.name for m in dep.lora.modules] == ["sql", "support"]
        app = create_app(cfg)
        paths = {r.path for r in app.routes}
        assert {"/v1/load_lora_adapter", "/v1/chat/completions/render"} <= paths
        assert list(cfg.routes) == args.served_model_name
        nixl = dep.kv_transfer.side_channel_port
        assert nixl in {p["containerPort"] for p in c["ports"]}
        assert nixl in {p["port"] for p in svc["spec"]["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] in paths
