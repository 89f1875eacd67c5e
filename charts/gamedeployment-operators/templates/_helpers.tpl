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
{{- end -}}

{{- define "gdo.hook.args" -}}
- --max-inflight-measurements={{ .Values.hookOperator.maxInflightMeasurements }}
{{- if .Values.hookOperator.labelSelector }}
- --label-selector={{ .Values.hookOperator.labelSelector }}
{{- end }}
{{- end -}}

{{/* Leader election: get, create and renew (update) the operator's own Lease in the release namespace. */}}
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
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
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
