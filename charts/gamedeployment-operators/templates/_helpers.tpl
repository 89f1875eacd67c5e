{{/* Base name of every object of this release. */}}
{{- define "gdo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gdo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gdo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Role or ClusterRole, depending on the namespace scope. */}}
{{- define "gdo.roleKind" -}}
{{- if .Values.watchNamespace -}}Role{{- else -}}ClusterRole{{- end -}}
{{- end -}}

{{- define "gdo.gamedeployment.args" -}}
{{- $w := .Values.gamedeploymentOperator.webhook }}
{{- if $w.enabled }}
- --webhook-address=0.0.0.0:{{ $w.port }}
- --webhook-cert-dir=/etc/gamedeployment-operator/webhook-tls
- --webhook-operator-user=system:serviceaccount:{{ .Release.Namespace }}:{{ include "gdo.fullname" . }}-gamedeployment
- --pod-gate-deadline={{ $w.podGate.deadline }}
- --max-pod-gate-deadline={{ $w.podGate.maxDeadline }}
- --webhook-answer-within={{ max 1 (sub (int $w.timeoutSeconds) 1) }}s
- --shutdown-drain={{ int .Values.gamedeploymentOperator.shutdownDrainSeconds }}s
{{- if $w.clientAuth.enabled }}
- --webhook-client-ca=/etc/gamedeployment-operator/webhook-client-ca/ca.crt
{{- end }}
{{- if $w.clientAuth.unverifiedMayMark }}
- --webhook-unverified-may-mark
{{- end }}
{{- range $w.podGate.privilegedGroups }}
- --pod-gate-privileged-group={{ . }}
{{- end }}
- --deletion-allow-default={{ $w.deletionProtection.default }}
{{- end }}
{{- end -}}

{{- define "gdo.hook.args" -}}
- --max-inflight-measurements={{ .Values.hookOperator.maxInflightMeasurements }}
- --max-inflight-per-namespace-percent={{ .Values.hookOperator.maxInflightPerNamespacePercent }}
- --kubernetes-provider-kinds={{ join "," .Values.hookOperator.kubernetesProviderKinds }}
- --condition-isolation={{ .Values.hookOperator.conditions.isolation }}
- --condition-timeout={{ .Values.hookOperator.conditions.timeout }}
- --condition-memory-bytes={{ int64 .Values.hookOperator.conditions.memoryBytes }}
- --condition-threads={{ .Values.hookOperator.conditions.workers }}
- --condition-penalty={{ .Values.hookOperator.conditions.penalty }}
{{- if .Values.hookOperator.secretArgs.enabled }}
- --secret-args
{{- end }}
{{- range .Values.hookOperator.egress.denyCIDRs }}
- --web-deny-cidr={{ . }}
{{- end }}
{{- range .Values.hookOperator.egress.allowCIDRs }}
- --web-allow-cidr={{ . }}
{{- end }}
{{- if .Values.hookOperator.labelSelector }}
- --label-selector={{ .Values.hookOperator.labelSelector }}
{{- end }}
{{- end -}}

{{/* Leader election: create the Lease, then get and renew (update) only the operator's own Lease (named after
its ServiceAccount, as the Deployment's --leader-elect-lease-name) in the release namespace. */}}
{{- define "gdo.leaderElectionRbac" -}}
{{- $root := .root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gdo.labels" $root | nindent 4 }}
rules:
  # Create the Lease the first time (create cannot be limited to a name).
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  # Read and renew only this operator's own Lease.
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ .name }}]
    verbs: [get, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gdo.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
{{- end -}}

{{/* The failurePolicy of one webhook: `webhook.failurePolicy.<which>`, else the single value set for the three gate
webhooks (podGate, podEviction, deletionProtection; hookValidation only takes its own key), else the default of
that webhook. values.yaml leaves `failurePolicy` unset (null), so that both forms merge without a Helm warning (a
string over a default map is "cannot overwrite table with non table"). */}}
{{- define "gdo.failurePolicy" -}}
{{- $policy := index . 0 }}
{{- $which := index . 1 }}
{{- $defaults := dict "podGate" "Fail" "podEviction" "Ignore" "deletionProtection" "Ignore" "hookValidation" "Ignore" }}
{{- if and (kindIs "string" $policy) (ne $which "hookValidation") }}{{ $policy }}
{{- else if kindIs "map" $policy }}{{ get $policy $which | default (get $defaults $which) }}
{{- else }}{{ get $defaults $which }}{{ end }}
{{- end -}}

{{/* Preferred podAntiAffinity spreading one operator's replicas over nodes. */}}
{{- define "gdo.spreadOverNodes" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            app.kubernetes.io/instance: {{ .root.Release.Name }}
            app.kubernetes.io/name: {{ .name }}
{{- end -}}
