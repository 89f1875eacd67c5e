#!/usr/bin/env python3
"""Drives Helm v4 (PyPI helm-python-sdk, no helm binary) for the chart tests.

    chart.py lint <chart> [--values JSON]
    chart.py render <chart> [--values JSON]             -> JSON list of rendered objects
    chart.py install|upgrade <chart> <release> --kubeconfig K --namespace N [--values JSON]
    chart.py uninstall <release> --kubeconfig K --namespace N
    chart.py list --kubeconfig K --namespace N           -> JSON list of release names

Exit 1 with the Helm error on failure; lint fails on any warning or error.
"""
import argparse
import json
import sys

import helm_python as helm
import yaml


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["lint", "render", "install", "upgrade", "uninstall", "list"])
    p.add_argument("rest", nargs="*")
    p.add_argument("--values", default="{}")
    p.add_argument("--kubeconfig")
    p.add_argument("--namespace", default="default")
    p.add_argument("--release", default="test", help="release name for render")
    a = p.parse_args()
    values = json.loads(a.values)
    try:
        if a.action == "lint":
            report = helm.lint(a.rest[0], values, strict=True)
            problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
            print(json.dumps(report, indent=2))
            return 1 if problems or report.get("errors") else 0
        if a.action == "render":
            rendered = helm.Chart.load(a.rest[0]).render(values, name=a.release, namespace=a.namespace, is_install=True)
            docs = []
            for path, text in sorted(rendered.items()):
                if path.endswith("NOTES.txt"):
                    continue
                docs.extend(d for d in yaml.safe_load_all(text) if d)
            print(json.dumps(docs))
            return 0
        config = helm.Config(kubeconfig_path=a.kubeconfig, namespace=a.namespace)
        if a.action == "install":
            rel = config.install(a.rest[0], a.rest[1], values, namespace=a.namespace, timeout=120)
            print(json.dumps({"name": a.rest[1], "version": getattr(rel, "version", None) if not isinstance(rel, dict) else rel.get("version")}, default=str))
        elif a.action == "upgrade":
            rel = config.upgrade(a.rest[0], a.rest[1], values, namespace=a.namespace, timeout=120)
            print(json.dumps({"name": a.rest[1], "version": getattr(rel, "version", None) if not isinstance(rel, dict) else rel.get("version")}, default=str))
        elif a.action == "uninstall":
            config.uninstall(a.rest[0])
            print(json.dumps({"uninstalled": a.rest[0]}))
        elif a.action == "list":
            releases = config.list()
            names = [r["name"] if isinstance(r, dict) else getattr(r, "name", str(r)) for r in releases]
            print(json.dumps(names))
        return 0
    except helm.HelmError as e:
        print(f"helm {a.action} failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
