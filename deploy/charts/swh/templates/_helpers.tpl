{{/* The chart name, or nameOverride. */}}
{{- define "swh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name: fullnameOverride, the release name
when it contains the chart name, or "<release>-<chart>"; at most 40
characters, so "<prefix>-controller-metrics" stays a valid Service name. */}}
{{- define "swh.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "swh.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "swh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "swh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: swh
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "controller"). */}}
{{- define "swh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swh.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "swh.componentLabels" -}}
{{ include "swh.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image of one component: (dict "root" $ "image" .Values.controller.image). */}}
{{- define "swh.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The rules of the kind (ClusterRole or Role) that controller-gen wrote
for one binary into files/rbac/<binary>/role.yaml, from the RBAC markers in
its code: (dict "root" $ "binary" "controller" "kind" "Role"). The markers
are the one source of the permissions; `make generate` refreshes the file. */}}
{{- define "swh.generatedRules" -}}
{{- $path := printf "files/rbac/%s/role.yaml" .binary -}}
{{- $file := .root.Files.Get $path -}}
{{- if not $file -}}
{{- fail (printf "%s is missing (run make generate)" $path) -}}
{{- end -}}
{{- $rules := list -}}
{{- range $doc := splitList "\n---\n" $file -}}
{{- $obj := fromYaml $doc -}}
{{- if eq (toString (get $obj "kind")) $.kind -}}
{{- $rules = concat $rules (get $obj "rules") -}}
{{- end -}}
{{- end -}}
{{- if not $rules -}}
{{- fail (printf "%s has no %s rules" $path .kind) -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}

{{/* The labels of one alert: its severity and prometheusRule.alertLabels
(which cannot change the severity): (dict "root" $ "severity" "critical"). */}}
{{- define "swh.alertLabels" -}}
{{- toYaml (merge (dict "severity" .severity) .root.Values.prometheusRule.alertLabels) -}}
{{- end -}}

{{/* PromQL label matchers of one component's scrape targets:
monitoring.<component>Selector, or the job the chart's ServiceMonitor gives
them (the metrics Service's name): (dict "root" $ "component" "agent"). */}}
{{- define "swh.targetSelector" -}}
{{- $set := index .root.Values.monitoring (printf "%sSelector" .component) -}}
{{- if $set -}}
{{- $set -}}
{{- else -}}
{{- printf "job=%q" (printf "%s-%s-metrics" (include "swh.fullname" .root) .component) -}}
{{- end -}}
{{- end -}}

{{/* The runbook of one alert, its section of prometheusRule.runbookURL:
(dict "root" $ "alert" "SwhAgentDown"). */}}
{{- define "swh.runbookURL" -}}
{{- printf "%s#%s" .root.Values.prometheusRule.runbookURL (lower .alert) | quote -}}
{{- end -}}

{{/* The DNS names of the eviction guard's Service, one per line: those of
its serving certificate. */}}
{{- define "swh.webhookHosts" -}}
{{- $service := printf "%s-webhook" (include "swh.fullname" .) -}}
- {{ $service }}
- {{ $service }}.{{ .Release.Namespace }}
- {{ $service }}.{{ .Release.Namespace }}.svc
- {{ $service }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}
