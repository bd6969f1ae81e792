{{/* The release's full name, a DNS label (63 characters). */}}
{{- define "scaletrain.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The standard app.kubernetes.io labels on every object. */}}
{{- define "scaletrain.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "scaletrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: scaletrain
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select the operator's pods (immutable in a Deployment: keep them few). */}}
{{- define "scaletrain.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "scaletrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "scaletrain.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "scaletrain.subjects" -}}
- kind: ServiceAccount
  name: {{ include "scaletrain.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{- define "scaletrain.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The permission table generated from operator/scaletrain_operator/controller/rbac.py. */}}
{{- define "scaletrain.rbacRules" -}}
{{- .Files.Get "files/rbac-rules.yaml" -}}
{{- end -}}

{{/* The PriorityClass of capacity probes: the one named, else the chart's own (a namespaced install's named after
its namespace too: the class is cluster-wide). */}}
{{- define "scaletrain.probePriorityClass" -}}
{{- if .Values.capacityProbePriorityClass -}}
{{- .Values.capacityProbePriorityClass -}}
{{- else if .Values.watchNamespaces -}}
{{- printf "%s-%s-capacity-probe" (include "scaletrain.fullname" .) .Release.Namespace | trunc 253 -}}
{{- else -}}
{{- include "scaletrain.fullname" . }}-capacity-probe
{{- end -}}
{{- end }}
