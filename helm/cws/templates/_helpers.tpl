{{/* Name of the chart, or nameOverride. */}}
{{- define "cws.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of resource names: fullnameOverride, or <release>-<name>. */}}
{{- define "cws.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cws.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "cws.labels" -}}
{{ include "cws.commonLabels" . }}
{{ include "cws.selectorLabels" . }}
{{- end }}

{{- define "cws.redis.labels" -}}
{{ include "cws.commonLabels" . }}
{{ include "cws.redis.selectorLabels" . }}
{{- end }}

{{- define "cws.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cws.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{- define "cws.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cws.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "cws.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cws.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cws.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Secret that holds tenants.yaml (and generated keys). */}}
{{- define "cws.tenantsSecret" -}}
{{- default (printf "%s-tenants" (include "cws.fullname" .)) .Values.tenants.existingSecret }}
{{- end }}

{{- define "cws.publicURL" -}}
{{- if .Values.publicURL }}
{{- .Values.publicURL | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- printf "https://%s" (first .Values.ingress.hosts).host }}
{{- else }}
{{- printf "http://%s.%s.svc:%v" (include "cws.fullname" .) .Release.Namespace .Values.service.port }}
{{- end }}
{{- end }}

{{/*
cws.tenantsFile renders tenants.yaml and the generated HS256 secrets, as a dict
{"file": <yaml>, "keys": {<file name>: <secret>}}, serialised with toJson. Generated
secrets are kept across upgrades by reading the existing Secret.
*/}}
{{- define "cws.tenantsFile" -}}
{{- $existing := dict }}
{{- $prev := lookup "v1" "Secret" .Release.Namespace (include "cws.tenantsSecret" .) }}
{{- if $prev }}{{ $existing = $prev.data | default dict }}{{ end }}
{{- $keys := dict }}
{{- $tenants := list }}
{{- range $t := .Values.tenants.list }}
{{- $out := omit $t "keys" "policy" }}
{{- if $t.policy }}
{{- if not (hasKey $.Values.policies $t.policy) }}
{{- fail (printf "tenants.list: tenant %q names policy %q, which is not under policies" $t.id $t.policy) }}
{{- end }}
{{- $_ := set $out "policy" (printf "%s.cws-policy.json" $t.policy) }}
{{- end }}
{{- $klist := list }}
{{- range $k := $t.keys | default list }}
{{- $kout := deepCopy $k }}
{{- if and (eq (upper ($k.alg | default "")) "HS256") (not $k.secret) (not $k.secretFile) }}
{{- $file := printf "%s.%s.key" $t.id $k.kid }}
{{- $secret := "" }}
{{- if hasKey $existing $file }}
{{- $secret = index $existing $file | b64dec }}
{{- else }}
{{- $secret = randAlphaNum 48 }}
{{- end }}
{{- $_ := set $keys $file $secret }}
{{- $_ := set $kout "secretFile" $file }}
{{- end }}
{{- $klist = append $klist $kout }}
{{- end }}
{{- if $klist }}{{ $_ := set $out "keys" $klist }}{{ end }}
{{- $tenants = append $tenants $out }}
{{- end }}
{{- dict "file" (toYaml (dict "tenants" $tenants)) "keys" $keys | toJson }}
{{- end }}

{{/* The Redis URL env var of the cws container. */}}
{{- define "cws.redisEnv" -}}
{{- if not .Values.redis.enabled }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "redis.enabled=false keeps the sessions in each cws pod's memory, which replicas do not share: set replicaCount: 1 (not %v), or use Redis" .Values.replicaCount) }}
{{- end }}
{{- else if .Values.redis.bundled }}
- name: CWS_REDIS_URL
  value: {{ printf "redis://%s-redis:6379/0" (include "cws.fullname" .) | quote }}
{{- else if .Values.redis.external.existingSecret }}
- name: CWS_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.existingSecretKey }}
{{- else if .Values.redis.external.url }}
- name: CWS_REDIS_URL
  value: {{ .Values.redis.external.url | quote }}
{{- else }}
{{- fail "redis: set redis.bundled=true, or redis.external.url or redis.external.existingSecret (or redis.enabled=false with one replica)" }}
{{- end }}
{{- end }}

{{/* The sandbox driver, validated: docker or kubernetes. */}}
{{- define "cws.driver" -}}
{{- $d := .Values.driver | default "" }}
{{- if not (has $d (list "docker" "kubernetes")) }}
{{- fail (printf "driver must be docker or kubernetes, not %q" $d) }}
{{- end }}
{{- $d }}
{{- end }}

{{/* driver=kubernetes: the sessions' namespace (kubernetes.namespace, or <release>-sessions). */}}
{{- define "cws.kube.namespace" -}}
{{- $ns := .Values.kubernetes.namespace | default (printf "%s-sessions" .Release.Name) }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) }}
{{- fail (printf "kubernetes.namespace %q is not a namespace name (a DNS label: a-z, 0-9, '-', at most 63); set kubernetes.namespace" $ns) }}
{{- end }}
{{- if and .Values.kubernetes.createNamespace (eq $ns .Release.Namespace) }}
{{- fail (printf "kubernetes.namespace %q is the release's own namespace: the chart cannot create it (set kubernetes.createNamespace=false), and sessions are better kept apart from cws and Redis" $ns) }}
{{- end }}
{{- $ns }}
{{- end }}

{{/* driver=kubernetes: the image whose cws-agent each session pod's init container installs. */}}
{{- define "cws.kube.agentImage" -}}
{{- .Values.kubernetes.agentImage | default (include "cws.image" .) }}
{{- end }}

{{/* driver=kubernetes: the cws container's env for the Kubernetes driver (in-cluster config). */}}
{{- define "cws.kubeEnv" -}}
- name: CWS_DRIVER
  value: kubernetes
- name: CWS_KUBE_NAMESPACE
  value: {{ include "cws.kube.namespace" . | quote }}
- name: CWS_KUBE_AGENT_IMAGE
  value: {{ include "cws.kube.agentImage" . | quote }}
- name: CWS_KUBE_TRANSPORT
  value: {{ .Values.kubernetes.transport | quote }}
{{- with .Values.kubernetes.storageClass }}
- name: CWS_KUBE_STORAGE_CLASS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kubernetes.runtimeClassName }}
- name: CWS_KUBE_RUNTIME_CLASS
  value: {{ . | quote }}
{{- end }}
{{- if .Values.kubernetes.userNamespaces }}
- name: CWS_KUBE_USER_NAMESPACES
  value: "true"
{{- end }}
{{- end }}
