#!/usr/bin/env python3
"""Regenerates types.txt: the protobuf field numbers of the built-in kinds kube-sim
serves, so that request bodies sent as `application/vnd.kubernetes.protobuf` (client-go's
typed clients: kubectl create, Helm's release storage) decode into JSON.

Field numbers come from the prost code of the k8s-pb crate (generated from Kubernetes'
generated.proto files); JSON names and required fields from k8s-openapi's serde impls.

Usage: protobuf_gen.py <k8s-pb-0.9.x/src> <k8s-openapi-0.29.x/src/v1_37> > types.txt

types.rs parses types.txt once, on the first protobuf request body.
"""
import os, re, sys

pb_root, oa_root = sys.argv[1], sys.argv[2]

# --- k8s-openapi: definition -> {rust field -> json name}, definition -> required json names
oa_fields, oa_required = {}, {}
schema_re = re.compile(r'"(io\.k8s\.[A-Za-z0-9_.\-]+)"\.into\(\)')
ser_re = re.compile(r'serialize_field\(&mut state, "([^"]+)", &self\.([a-z0-9_]+)\)')
ser_opt_re = re.compile(r'if let Some\(value\) = &self\.([a-z0-9_]+) \{\s*\n\s*crate::serde::ser::SerializeStruct::serialize_field\(&mut state, "([^"]+)"')
req_re = re.compile(r'"required": \[([^\]]*)\]')
for dirpath, _, files in os.walk(oa_root):
    for f in files:
        if not f.endswith('.rs'):
            continue
        src = open(os.path.join(dirpath, f)).read()
        names = schema_re.findall(src)
        if not names:
            continue
        d = names[0]
        m = {}
        for a, b in ser_re.findall(src):
            m[b] = a
        for b, a in ser_opt_re.findall(src):
            m[b] = a
        oa_fields[d] = m
        r = req_re.search(src)
        oa_required[d] = re.findall(r'"([^"]+)"', r.group(1)) if r else []

def camel(s):
    parts = s.split('_')
    return parts[0] + ''.join(p[:1].upper() + p[1:] for p in parts[1:])

# --- k8s-pb: package -> messages
struct_re = re.compile(r'pub struct (\w+) \{(.*?)\n\}', re.S)
field_re = re.compile(r'#\[prost\(([^\]]*)\)\]\s*\n\s*pub (r#)?(\w+): ([^;]*?),\s*\n', re.S)
messages = {}  # def name -> list of (tag, json, kind, target)

def pkg_of(rel):
    parts = rel.split(os.sep)[:-1]
    if parts[0] == 'apiextensions_apiserver':
        parts[0] = 'apiextensions-apiserver'
    if parts[0] == 'kube_aggregator':
        parts[0] = 'kube-aggregator'
    return 'io.k8s.' + '.'.join(parts)

def resolve(pkg, rust_type):
    t = re.sub(r'\s+', '', rust_type)
    while '<' in t:
        t = t[t.index('<') + 1:t.rindex('>')]
    t = t.strip(',')
    segs = [s for s in t.split('::') if s]
    name = segs[-1]
    if len(segs) == 1:
        return f'{pkg}.{name}'
    ups = sum(1 for s in segs if s == 'super')
    base = pkg.split('.')
    base = base[:len(base) - ups]
    rest = [s for s in segs[:-1] if s != 'super']
    rest = [('apiextensions-apiserver' if s == 'apiextensions_apiserver' else s) for s in rest]
    return '.'.join(base + rest + [name])

for dirpath, _, files in os.walk(pb_root):
    for f in files:
        if f != 'mod.rs':
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, pb_root)
        if rel == 'mod.rs' or rel.count(os.sep) < 2:
            continue
        pkg = pkg_of(rel)
        src = open(path).read()
        for sm in struct_re.finditer(src):
            name, body = sm.group(1), sm.group(2) + '\n'
            d = f'{pkg}.{name}'
            fields = []
            chunks = body.split('#[prost(')[1:]
            for chunk in chunks:
                attr = chunk.split(')]', 1)[0]
                decl = chunk.split(')]', 1)[1]
                decl = re.split(r'\n\s*///', decl)[0]
                dm = re.search(r'pub (r#)?(\w+):\s*(.*)', decl, re.S)
                rust, ty = dm.group(2), dm.group(3).strip().rstrip(',')
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                jm = oa_fields.get(d, {})
                json_name = jm.get(rust) or jm.get(rust + '_') or camel(rust)
                if attr.startswith('btree_map') or attr.startswith('map'):
                    vt = re.search(r'map = "string, (\w+)"', attr).group(1)
                    if vt == 'message':
                        args = ty[ty.index('<') + 1:ty.rindex('>')]
                        inner = [a for a in args.split(',') if a.strip()][1]
                        kind, target = 'MapMsg', resolve(pkg, inner)
                    elif vt == 'bytes':
                        kind, target = 'MapBytes', None
                    else:
                        kind, target = 'MapStr', None
                else:
                    scalar = attr.split(',')[0].strip()
                    scalar = scalar.split('=')[0].strip()
                    repeated = 'repeated' in attr
                    if scalar == 'message':
                        kind, target = ('RepMsg' if repeated else 'Msg'), resolve(pkg, ty)
                    else:
                        base = {'string': 'Str', 'int32': 'Int', 'int64': 'Int', 'bool': 'Bool', 'double': 'Double', 'bytes': 'Bytes'}[scalar]
                        kind, target = (('Rep' + base) if repeated else base), None
                fields.append((tag, json_name, kind, target))
            messages[d] = fields

ROOTS = [
    'io.k8s.api.core.v1.' + k for k in ['Namespace', 'Pod', 'Event', 'ConfigMap', 'Secret', 'ServiceAccount', 'Service', 'Endpoints',
                                        'PersistentVolumeClaim', 'PersistentVolume', 'Node', 'LimitRange', 'ResourceQuota', 'Binding']
] + ['io.k8s.api.apps.v1.' + k for k in ['Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet', 'ControllerRevision']] + [
    'io.k8s.api.batch.v1.Job', 'io.k8s.api.batch.v1.CronJob', 'io.k8s.api.coordination.v1.Lease', 'io.k8s.api.events.v1.Event',
    'io.k8s.api.rbac.v1.Role', 'io.k8s.api.rbac.v1.RoleBinding', 'io.k8s.api.rbac.v1.ClusterRole', 'io.k8s.api.rbac.v1.ClusterRoleBinding',
    'io.k8s.api.policy.v1.PodDisruptionBudget', 'io.k8s.api.networking.v1.Ingress', 'io.k8s.api.networking.v1.NetworkPolicy',
    'io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler', 'io.k8s.api.autoscaling.v1.Scale', 'io.k8s.api.storage.v1.StorageClass',
    'io.k8s.api.scheduling.v1.PriorityClass', 'io.k8s.api.authorization.v1.SelfSubjectAccessReview', 'io.k8s.api.authorization.v1.SubjectAccessReview',
    'io.k8s.api.authorization.v1.SelfSubjectRulesReview', 'io.k8s.api.authorization.v1.LocalSubjectAccessReview',
    'io.k8s.api.authentication.v1.SelfSubjectReview', 'io.k8s.api.authentication.v1.TokenRequest', 'io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions',
]
SPECIAL = {
    'io.k8s.apimachinery.pkg.apis.meta.v1.Time', 'io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime', 'io.k8s.apimachinery.pkg.apis.meta.v1.Duration',
    'io.k8s.apimachinery.pkg.api.resource.Quantity', 'io.k8s.apimachinery.pkg.util.intstr.IntOrString', 'io.k8s.apimachinery.pkg.runtime.RawExtension',
    'io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1',
}
# Kinds added after the table was first generated go last, so existing indices stay put.
LATE_ROOTS = ['io.k8s.api.policy.v1.Eviction']
order, seen = [], set()
for roots in (ROOTS, LATE_ROOTS):
    todo = list(roots)
    while todo:
        d = todo.pop(0)
        if d in seen:
            continue
        if d not in messages:
            raise SystemExit(f'unknown message {d}')
        seen.add(d)
        order.append(d)
        if d in SPECIAL:
            continue
        for (_, _, _, target) in messages[d]:
            if target and target not in seen:
                todo.append(target)
index = {d: i for i, d in enumerate(order)}

print('# @generated by gen.py from k8s-pb 0.9 (field numbers) and k8s-openapi 0.29 (JSON names). Do not edit.')
print('# A message a line: its definition, its required JSON fields (comma-separated, - for none), then its fields as')
print('# tag:json:kind. Msg(n), RepMsg(n) and MapMsg(n) name the n-th message line (from 0; these # lines do not count).')
for d in order:
    req = ','.join(oa_required.get(d, [])) or '-'
    fields = []
    if d not in SPECIAL:
        for (tag, js, kind, target) in messages[d]:
            k = f'{kind}({index[target]})' if target is not None else kind
            fields.append(f'{tag}:{js}:{k}')
    print(' '.join([d, req] + fields))
