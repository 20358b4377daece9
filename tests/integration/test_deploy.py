"""deploy/: the Kubernetes manifests validate against Kubernetes' own OpenAPI schemas
(kubernetes-validate from PyPI, strict: unknown fields are errors), and what they say matches
the code: every flag they pass exists in the command's --help, the probes name the controller's
real endpoints, Services point at named container ports, the worker's slice comes from its
label, the proxy is on 29000. The Slurm script parses (its run is test_slurm.py)."""
import re
import subprocess

import pytest

from conftest import SOURCE_DIR, run_loom

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (pip) checks the manifests")
yaml = pytest.importorskip("yaml")

K8S = SOURCE_DIR / "deploy" / "k8s"
FILES = ["namespace.yaml", "secret.yaml", "controller.yaml", "workers.yaml", "proxy.yaml"]


def docs():
    out = []
    for f in FILES:
        out += [d for d in yaml.safe_load_all((K8S / f).read_text()) if d]
    return out


def test_manifests_validate_against_the_kubernetes_schemas():
    version = kv.latest_version()
    for d in docs():
        kv.validate(d, version, strict=True)  # raises ValidationError naming the field
    # a manifest with a mistake is caught (the validator is not a no-op)
    bad = next(d for d in docs() if d["kind"] == "Deployment")
    bad = yaml.safe_load(yaml.safe_dump(bad))
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "twenty-nine thousand"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(f for f in FILES if f != "secret.yaml")


def containers(d):
    spec = d["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def test_manifests_match_the_code():
    helps = {}
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs()}
    for d in docs():
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            sub = c["args"][0]
            if sub not in helps:
                helps[sub] = run_loom(sub, "--help", check=True).stdout
            for a in c["args"][1:]:
                flag = a.split("=", 1)[0]
                assert re.search(rf"(^|\s){re.escape(flag)}\b", helps[sub]), f"loom {sub} has no {flag}"
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe"):
                p = c[probe]
                target = p.get("httpGet") or p.get("tcpSocket")
                assert target["port"] in ports, f"{probe} names port {target['port']}"
                if "httpGet" in p:
                    assert p["httpGet"]["path"] in ("/healthz", "/readyz")
                    assert f"--http=0.0.0.0:{ports[target['port']]}" in c["args"]
        for v in d["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in v:
                assert ("Secret", v["secret"]["secretName"]) in by_kind
    ctl = by_kind[("Deployment", "loom-controller")]
    args = ctl["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--secret-file=/etc/loom/secret" in args and "--tokens-file=/etc/loom/tokens" in args
    wk = by_kind[("StatefulSet", "loom-worker-slice-0")]
    labels = wk["spec"]["template"]["metadata"]["labels"]
    assert labels["loom.dev/slice"] == "slice-0"
    env = {e["name"]: e for e in wk["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "loom.dev/slice" in env["LOOM_SLICE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert "--controller=loom-controller:29100" in wk["spec"]["template"]["spec"]["containers"][0]["args"]
    for kind, name in (("Service", "loom-controller"), ("Service", "loom-proxy"), ("Service", "loom-worker")):
        svc = by_kind[(kind, name)]
        target = next(d for d in docs() if d["kind"] in ("Deployment", "StatefulSet") and
                      all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                          for k, v in svc["spec"]["selector"].items()))
        names = {p["name"] for c in target["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in names, (name, p)
    assert by_kind[("Service", "loom-proxy")]["spec"]["ports"][0]["port"] == 29000


def test_slurm_script_parses():
    r = subprocess.run(["bash", "-n", str(SOURCE_DIR / "deploy" / "slurm" / "loom.sbatch")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
