#!/usr/bin/env python3
"""Checks the manifests in deploy/kubernetes/ offline.

1. Each document validates against the Kubernetes 1.30 schemas, strictly (no unknown field),
   with kubernetes-validate (which ships the schemas: no cluster, no network).
2. Every container of every workload (Deployment, DaemonSet, Job, Pod; init containers and
   native sidecars included) runs as a numeric non-root user with runAsNonRoot, a read-only
   root filesystem, no privilege escalation, every capability dropped and the RuntimeDefault
   seccomp profile (container or pod level), and has CPU and memory requests and limits;
   every long-running container (not a Job's or bare Pod's main container) has a readiness and
   a liveness probe, and the servers' probes are /readyz and /healthz.
3. What the deployment needs is there: the broker and the console as Deployments of two
   replicas with a Service, PodDisruptionBudget and NetworkPolicy each; the launcher as a
   DaemonSet handing a hostPath socket to pods (hostPID), and as a native sidecar (an init
   container with restartPolicy: Always) in a Job; no secret value in a ConfigMap or on a
   command line.

Prints one line per check and ends with "N passed, N failed"; exit status 1 on a failure.
Usage: deploy/kubernetes/check.py [--kubernetes-version 1.30]
"""

import argparse
import glob
import os
import re
import sys
import tomllib

import yaml
import kubernetes_validate

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "Pod"}

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")


def documents():
    for path in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    yield os.path.basename(path), doc


def pod_spec(doc):
    if doc["kind"] == "Pod":
        return doc["spec"]
    return doc["spec"]["template"]["spec"]


def effective(container, pod, key):
    """A securityContext field from the container, else the pod."""
    c = container.get("securityContext") or {}
    if key in c:
        return c[key]
    return (pod.get("securityContext") or {}).get(key)


def containers_of(doc):
    """(container, role) for each container: 'main', 'init' or 'sidecar'."""
    spec = pod_spec(doc)
    for c in spec.get("initContainers") or []:
        yield c, "sidecar" if c.get("restartPolicy") == "Always" else "init"
    for c in spec.get("containers") or []:
        yield c, "main"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubernetes-version", default="1.30")
    a = ap.parse_args()

    docs = list(documents())
    check(len(docs) > 0, f"{len(docs)} documents read")

    # 1. Schemas.
    for name, doc in docs:
        what = f"{name}: {doc['kind']}/{doc['metadata']['name']} validates against Kubernetes {a.kubernetes_version} (strict)"
        try:
            kubernetes_validate.validate(doc, a.kubernetes_version, strict=True)
            check(True, what)
        except kubernetes_validate.ValidationError as e:
            check(False, f"{what}: {e.message} at {'.'.join(str(p) for p in e.path)}")
        except Exception as e:  # an unknown kind or version
            check(False, f"{what}: {e}")

    # 2. Every container.
    for name, doc in docs:
        if doc["kind"] not in WORKLOADS:
            continue
        pod = pod_spec(doc)
        long_running = doc["kind"] in {"Deployment", "DaemonSet", "StatefulSet"}
        for c, role in containers_of(doc):
            where = f"{name}: {doc['kind']}/{doc['metadata']['name']} {role} container {c['name']}"
            sc = c.get("securityContext") or {}
            uid = effective(c, pod, "runAsUser")
            check(effective(c, pod, "runAsNonRoot") is True, f"{where}: runAsNonRoot")
            check(isinstance(uid, int) and uid > 0, f"{where}: numeric non-root user ({uid})")
            gid = effective(c, pod, "runAsGroup")
            check(isinstance(gid, int) and gid > 0, f"{where}: numeric non-root group ({gid})")
            check(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem")
            check(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false")
            check(sc.get("privileged") in (None, False), f"{where}: not privileged")
            drop = ((sc.get("capabilities") or {}).get("drop")) or []
            add = ((sc.get("capabilities") or {}).get("add")) or []
            check("ALL" in drop and not add, f"{where}: capabilities drop ALL, add none")
            seccomp = (effective(c, pod, "seccompProfile") or {}).get("type")
            check(seccomp == "RuntimeDefault", f"{where}: seccompProfile RuntimeDefault")
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                have = res.get(kind) or {}
                check("cpu" in have and "memory" in have, f"{where}: {kind} for cpu and memory")
            if (long_running and role == "main") or role == "sidecar":
                check("readinessProbe" in c, f"{where}: readiness probe")
                check("livenessProbe" in c, f"{where}: liveness probe")
            if c["name"] in {"broker", "console"}:
                check(((c.get("readinessProbe") or {}).get("httpGet") or {}).get("path") == "/readyz",
                      f"{where}: readiness asks /readyz")
                check(((c.get("livenessProbe") or {}).get("httpGet") or {}).get("path") == "/healthz",
                      f"{where}: liveness asks /healthz")
            words = " ".join(str(x) for x in (c.get("command") or []) + (c.get("args") or []))
            check(not re.search(r"(token|secret|key|password)=[^/ ]", words, re.I),
                  f"{where}: no secret value on the command line")
            for e in c.get("env") or []:
                if re.search(r"TOKEN|SECRET|PASSWORD|DATABASE_URL|KEY$", e["name"]):
                    check("value" not in e, f"{where}: {e['name']} from a Secret, not a literal")

    # 3. What must be there.
    by_kind = {}
    for name, doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    for app in ("countersign-broker", "countersign-console"):
        d = by_kind.get("Deployment", {}).get(app)
        check(d is not None and d["spec"].get("replicas") == 2, f"{app}: a Deployment of two replicas")
        for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount"):
            check(app in by_kind.get(kind, {}), f"{app}: a {kind}")
        np = by_kind.get("NetworkPolicy", {}).get(app)
        check(np is not None and set(np["spec"].get("policyTypes", [])) == {"Ingress", "Egress"},
              f"{app}: its NetworkPolicy restricts ingress and egress")
        sa = by_kind.get("ServiceAccount", {}).get(app)
        check(sa is not None and sa.get("automountServiceAccountToken") is False,
              f"{app}: its ServiceAccount token is not mounted by default")
    crb = by_kind.get("ClusterRoleBinding", {}).get("countersign-broker-issuer-discovery")
    check(crb is not None and crb["roleRef"]["name"] == "system:service-account-issuer-discovery",
          "countersign-broker: allowed the issuer's keys (service-account-issuer-discovery), nothing more")
    ds = by_kind.get("DaemonSet", {}).get("countersign-launcher")
    ok = False
    if ds is not None:
        spec = pod_spec(ds)
        host_paths = [v for v in spec.get("volumes", []) if "hostPath" in v]
        ok = spec.get("hostPID") is True and len(host_paths) == 1
    check(ok, "countersign-launcher: a DaemonSet sharing the host's PID namespace, its socket in one hostPath directory")
    sidecars = [(d, c) for d in by_kind.get("Job", {}).values()
                for c, role in containers_of(d) if role == "sidecar"]
    check(any(c["name"] == "launcher" for _, c in sidecars),
          "the launcher as a native sidecar (init container, restartPolicy: Always) in a Job")
    for d, _ in sidecars:
        spec = pod_spec(d)
        check(spec.get("shareProcessNamespace") is True and not spec.get("hostPID"),
              f"Job/{d['metadata']['name']}: one PID namespace for the pod, not the host's")
    for cm in by_kind.get("ConfigMap", {}).values():
        for key, text in (cm.get("data") or {}).items():
            bad = re.search(r"^\s*(console_token|seal_key|client_secret|password)\s*=", text, re.M)
            check(bad is None and "postgres://" not in text,
                  f"ConfigMap/{cm['metadata']['name']} {key}: names secret files, holds no secret")

    for cm in by_kind.get("ConfigMap", {}).values():
        for key, text in (cm.get("data") or {}).items():
            if key.endswith(".toml"):
                try:
                    tomllib.loads(text)
                    check(True, f"ConfigMap/{cm['metadata']['name']} {key}: TOML parses")
                except tomllib.TOMLDecodeError as e:
                    check(False, f"ConfigMap/{cm['metadata']['name']} {key}: {e}")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
