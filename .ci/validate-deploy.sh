#!/usr/bin/env bash
# Offline checks of deploy/: every YAML document under kubernetes/ against the Kubernetes JSON
# schemas bundled in PyPI's kubernetes-validate, strictly (an unknown or misspelt field fails),
# plus a few Kiln rules the schema cannot express; and `bash -n` on the Slurm templates.
#   usage: validate-deploy.sh VENV [DEPLOY_DIR]
#     VENV: a venv with kubernetes-validate installed (.ci/run installs it under its cache);
#     DEPLOY_DIR: defaults to deploy/ in this checkout.
# KILN_K8S_VERSIONS overrides the Kubernetes versions checked (space-separated).
set -euo pipefail
venv="${1:?usage: validate-deploy.sh VENV [DEPLOY_DIR]}"
dir="${2:-$(cd "$(dirname "$0")/.." && pwd)/deploy}"
# The oldest Kubernetes we support and the newest the pinned package ships: a field removed or
# renamed in between fails one of them.
versions="${KILN_K8S_VERSIONS:-1.30.0 1.37.0}"
[ -x "$venv/bin/python" ] || { echo "no venv at $venv (pip install kubernetes-validate)"; exit 2; }

status=0
for f in "$dir"/slurm/*.sbatch; do
  [ -e "$f" ] || continue
  if bash -n "$f"; then echo "ok   $f (bash -n)"; else echo "FAIL $f (bash -n)"; status=1; fi
done

# -I: no current directory on sys.path (a stray enum.py there would shadow the stdlib).
"$venv/bin/python" -I - "$dir/kubernetes" $versions <<'PY' || status=1
import glob, os, re, sys
import yaml
from kubernetes_validate import utils as kv

kdir, versions = sys.argv[1], sys.argv[2:]

# PyYAML keeps the last of two equal keys silently; a duplicated `env` or `resources` would hide
# half of a manifest from the schema check.
class StrictLoader(yaml.SafeLoader):
    pass
def no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)
StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, no_duplicates)

failures, docs = [], []
files = sorted(glob.glob(os.path.join(kdir, "*.yaml")) + glob.glob(os.path.join(kdir, "*.yml")))
if not files:
    failures.append(f"no manifests in {kdir}")
for path in files:
    try:
        with open(path) as fh:
            loaded = list(yaml.load_all(fh, Loader=StrictLoader))
    except yaml.YAMLError as e:
        failures.append(f"{path}: {e}")
        continue
    for i, doc in enumerate(loaded):
        if doc is None:
            continue
        where = f"{path} doc {i}"
        if not isinstance(doc, dict) or not all(k in doc for k in ("apiVersion", "kind", "metadata")):
            failures.append(f"{where}: not a Kubernetes object (apiVersion, kind, metadata)")
            continue
        where = f"{path} {doc['kind']}/{doc['metadata'].get('name')}"
        docs.append((where, doc))
        for v in versions:
            try:
                got = kv.validate(doc, v, strict=True)
                print(f"ok   {where} (Kubernetes {got}, strict)")
            except kv.ValidationError as e:
                field = ".".join(str(p) for p in e.path) or "(top level)"
                failures.append(f"{where} (Kubernetes {e.version}): {field}: {e.message}")
            except (kv.SchemaNotFoundError, kv.VersionNotSupportedError, kv.InvalidSchemaError) as e:
                # An unknown kind or apiVersion is an error here, not the CLI's warning.
                failures.append(f"{where}: {e.message}")

def template_labels(doc):
    return doc["spec"]["template"]["metadata"].get("labels", {}) or {}

# Rules the schema cannot state.
deployments = [(w, d) for w, d in docs if d["kind"] == "Deployment"]
for where, d in deployments:
    sel = d["spec"]["selector"].get("matchLabels", {})
    labels = template_labels(d)
    if any(labels.get(k) != v for k, v in sel.items()):
        failures.append(f"{where}: spec.selector.matchLabels {sel} does not match the pod labels {labels}")
    for c in d["spec"]["template"]["spec"]["containers"]:
        gpus = (c.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu")
        flags = [a for a in c.get("args", []) if a.startswith("--gpus")]
        if gpus is None and not flags:
            continue
        # kiln runs one stage per GPU slot: more slots than GPUs oversubscribe, fewer waste.
        m = re.fullmatch(r"--gpus=(\d+)", flags[0]) if len(flags) == 1 else None
        if gpus is None or m is None or int(m.group(1)) != int(gpus):
            failures.append(f"{where} container {c['name']}: --gpus=N must equal "
                            f"resources.limits.nvidia.com/gpu (args {flags}, limit {gpus})")
for where, s in [(w, d) for w, d in docs if d["kind"] == "Service"]:
    sel = s["spec"].get("selector") or {}
    if not any(all(template_labels(d).get(k) == v for k, v in sel.items()) for _, d in deployments):
        failures.append(f"{where}: selector {sel} matches no Deployment's pods")

for f in failures:
    print(f"FAIL {f}")
print(f"{len(docs)} Kubernetes objects checked against {' '.join(versions)}: "
      f"{'ok' if not failures else str(len(failures)) + ' failure(s)'}")
sys.exit(1 if failures else 0)
PY
exit "$status"
