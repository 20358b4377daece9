"""deploy/: the Kubernetes manifests validate against Kubernetes' own OpenAPI schemas
(kubernetes-validate from PyPI, strict: unknown fields are errors), and what they say matches
the code: every flag they pass exists in the command's --help, the probes name the controller's
real endpoints, Services point at named container ports, the worker's slice comes from its
label, the proxy is on 29000. The Slurm script parses (its run is test_slurm.py).
deploy/prometheus/prometheus.yml: its static job, run by a real Prometheus (Debian's package)
against a controller with --http-token-file, scrapes /metrics with the token (target up, samples
stored) while the same job with a wrong token is refused (401); its Kubernetes job names the
controller's labels and HTTP port."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import SOURCE_DIR, Cluster, run_loom, wait_for
from loomtest import free_port

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
    assert "--http-token-file=/etc/loom/http-token" in args
    assert "http-token" in by_kind[("Secret", "loom-auth")]["stringData"]
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


PROM = SOURCE_DIR / "deploy" / "prometheus" / "prometheus.yml"


def test_prometheus_config_matches_the_manifests():
    cfg = yaml.safe_load(PROM.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    for j in jobs.values():
        assert j["metrics_path"] == "/metrics"
        assert j["authorization"]["type"] == "Bearer" and j["authorization"]["credentials_file"]
    k8s = jobs["loom-controller"]
    ctl = next(d for d in docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "loom-controller")
    labels = ctl["spec"]["template"]["metadata"]["labels"]
    keep = k8s["relabel_configs"][0]
    assert keep["regex"] == f"{labels['app.kubernetes.io/name']};{labels['app.kubernetes.io/component']}"
    ports = {p["name"] for p in ctl["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert k8s["relabel_configs"][1]["regex"] in ports
    assert k8s["kubernetes_sd_configs"][0]["namespaces"]["names"] == [ctl["metadata"]["namespace"]]


def _prom_targets(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
        return {t["labels"]["job"]: t for t in json.loads(r.read())["data"]["activeTargets"]}


@pytest.mark.skipif(not shutil.which("prometheus") or not shutil.which("promtool"),
                    reason="prometheus (apt) runs the scrape config")
def test_prometheus_scrapes_with_the_token(procs, tmp_path):
    token = os.urandom(24).hex()
    (tmp_path / "http-token").write_text(token + "\n")
    (tmp_path / "wrong-token").write_text("0" * 48 + "\n")
    c = Cluster(procs, tmp_path)
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(tmp_path / "http.addr"),
                       "--http-token-file", str(tmp_path / "http-token"))
    http = wait_for(lambda: (tmp_path / "http.addr").exists() and (tmp_path / "http.addr").read_text().strip(), 10,
                    what="the HTTP address file")
    c.start_worker(2)
    c.wait_devices(2)
    # the shipped static job, pointed at this controller and token (Debian's Prometheus has no
    # Kubernetes discovery, so the other job is checked above instead)
    cfg = yaml.safe_load(PROM.read_text())
    static = next(j for j in cfg["scrape_configs"] if j["job_name"] == "loom-static")
    static["static_configs"] = [{"targets": [http]}]
    static["authorization"]["credentials_file"] = str(tmp_path / "http-token")
    static["scrape_interval"] = "1s"
    wrong = json.loads(json.dumps(static))
    wrong["job_name"] = "loom-wrong-token"
    wrong["authorization"]["credentials_file"] = str(tmp_path / "wrong-token")
    run_cfg = tmp_path / "prometheus.yml"
    run_cfg.write_text(yaml.safe_dump({"global": cfg["global"], "scrape_configs": [static, wrong]}))
    r = subprocess.run(["promtool", "check", "config", str(run_cfg)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={run_cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        _check_scrapes(port, prom)
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        log.close()


def _check_scrapes(port, prom):

    def scraped():
        try:
            t = _prom_targets(port)
        except OSError:
            return None
        ok = t.get("loom-static", {}).get("health") == "up"
        bad = t.get("loom-wrong-token", {}).get("health") == "down"
        return t if ok and bad else None
    t = wait_for(scraped, 60, interval=0.5, what="Prometheus to scrape the controller")
    assert "401" in t["loom-wrong-token"]["lastError"], t["loom-wrong-token"]
    q = urllib.parse.quote('loom_devices{state="healthy"}')
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={q}", timeout=5) as r:
        res = json.loads(r.read())["data"]["result"]
    assert [x["value"][1] for x in res if x["metric"]["job"] == "loom-static"] == ["2"], res
    assert prom.poll() is None
