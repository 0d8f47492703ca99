{{/* Name of every object: the release name, with the chart's unless it has it. */}}
{{- define "rdma-cdi.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rdma-cdi.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rdma-cdi.labels" -}}
{{ include "rdma-cdi.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The CDI vendor, which is also the DRA driver's name. */}}
{{- define "rdma-cdi.vendor" -}}
{{- dig "cdi" "vendor" "rdma.example.com" .Values.config -}}
{{- end -}}

{{/* The host directory the spec is written to (cdi.spec_dir). */}}
{{- define "rdma-cdi.specDir" -}}
{{- dig "cdi" "spec_dir" "/var/run/cdi" .Values.config -}}
{{- end -}}

{{/* The config file, at the same path on the host and in the agent, so the
spec's hooks are given a path the engine on the host can open. */}}
{{- define "rdma-cdi.configPath" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.host.configDir) .Values.host.configFile -}}
{{- end -}}

{{- define "rdma-cdi.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "rdma-cdi.serviceAccount" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "rdma-cdi.fullname" . }}
{{- end -}}

{{/* Every container's: root's uid for root's directories, and nothing more. */}}
{{- define "rdma-cdi.containerSecurity" -}}
{{- include "rdma-cdi.securityWithCapabilities" list -}}
{{- end -}}

{{/* containerSecurity with the capabilities listed in . added, for the one
container that needs them. */}}
{{- define "rdma-cdi.securityWithCapabilities" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsUser: 0
runAsNonRoot: false
capabilities:
  drop: [ALL]
  {{- with . }}
  add: {{ toJson . }}
  {{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The host paths host-stack discovery reads, as a JSON list of [path,
hostPath type]: the linker's cache (a file every glibc node has), the
providers' config and host.libraryDirs (directories, made empty where a node
lacks one, e.g. /lib64 on arm64, rather than failing the pod there), and
host.extraReadPaths (a file or a directory, unchecked). */}}
{{- define "rdma-cdi.hostReadPaths" -}}
{{- $paths := list (list "/etc/ld.so.cache" "File") (list "/etc/libibverbs.d" "DirectoryOrCreate") -}}
{{- range .Values.host.libraryDirs -}}
{{- $paths = append $paths (list . "DirectoryOrCreate") -}}
{{- end -}}
{{- range .Values.host.extraReadPaths -}}
{{- $paths = append $paths (list . "") -}}
{{- end -}}
{{- $paths | toJson -}}
{{- end -}}
