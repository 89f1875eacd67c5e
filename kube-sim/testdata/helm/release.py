"""Drives Helm v4 (PyPI helm-python-sdk) against kube-sim for the `helm` integration test.

Usage: release.py <kubeconfig> <chart dir>. Prints one JSON document per step on stdout.
"""
import json
import sys

import helm_python as helm

kubeconfig, chart = sys.argv[1], sys.argv[2]


def emit(step, value):
    print(json.dumps({"step": step, "value": value}), flush=True)


with helm.Config(kubeconfig_path=kubeconfig, namespace="default") as cfg:
    r = cfg.install(chart, "demo", {"greeting": "hi"}, timeout=60)
    emit("install", {k: r[k] for k in ("name", "revision", "status")})
    emit("list", [{k: i[k] for k in ("name", "revision", "status")} for i in cfg.list()])
    r = cfg.upgrade(chart, "demo", {"greeting": "bye", "replicas": 3}, timeout=60)
    emit("upgrade", {k: r[k] for k in ("name", "revision", "status")})
    emit("values", cfg.get_values("demo"))
    emit("history", [h["revision"] for h in cfg.history("demo")])
    # A release whose resources are ready without controllers, installed with Helm 4's
    # kstatus-based wait (watches).
    r = cfg.install(chart, "waited", {"deployment": False}, timeout=60, wait="watcher")
    emit("install-wait", {k: r[k] for k in ("name", "revision", "status")})
    cfg.uninstall("waited")
    emit("list-after-uninstall", sorted(i["name"] for i in cfg.list()))
