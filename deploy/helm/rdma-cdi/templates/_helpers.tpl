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
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
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

{{/* The host paths that hold the node's secrets (the kubelet's and the
control plane's keys, other pods' tokens, users' and sshd's keys, shadow),
its processes, devices and runtime sockets (/run: containerd's and CRI-O's,
a way to root). No value may mount one of them, or anything under one. */}}
{{- define "rdma-cdi.sensitiveHostPaths" -}}
{{- list "/etc/kubernetes" "/var/lib/kubelet" (trimSuffix "/" .Values.host.kubeletDir) "/root" "/home"
  "/etc/shadow" "/etc/shadow-" "/etc/gshadow" "/etc/gshadow-" "/etc/ssh"
  "/proc" "/sys" "/dev" "/var/run" "/run" | compact | uniq | toJson -}}
{{- end -}}

{{/* The first of the paths (index . 1) that the path (index . 0) is, or is
under; "" when none. */}}
{{- define "rdma-cdi.under" -}}
{{- $p := index . 0 -}}
{{- range index . 1 -}}
{{- if or (eq $p .) (hasPrefix (printf "%s/" .) $p) -}}
{{- . -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Fails the render, naming the value, where a value would hand the agent
more of the node than its job. The schema checks each value's shape; this,
the place it names: a careless operator must not give the agent the host's
/etc, its secrets or a runtime's socket through a path that merely looks
narrow (SECURITY.md). */}}
{{- define "rdma-cdi.checkHostPaths" -}}
{{- $sensitive := include "rdma-cdi.sensitiveHostPaths" . | fromJsonArray -}}
{{- /* Read-only, but read: a secret read is a secret lost. */ -}}
{{- range $key := list "libraryDirs" "extraReadPaths" -}}
{{- range $path := get $.Values.host $key | default list -}}
{{- if or (eq $path "/") (contains ".." $path) -}}
{{- fail (printf "host.%s %q: want a clean absolute path narrower than / (no ..)" $key $path) -}}
{{- end -}}
{{- with include "rdma-cdi.under" (list (trimSuffix "/" $path) $sensitive) -}}
{{- fail (printf "host.%s %q: it is %s or under it, which holds the node's secrets, processes, devices or runtime sockets; name the directory of the RDMA libraries themselves" $key $path .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The IPAM plugin's binary directory and files: read-only too. */ -}}
{{- $pn := .Values.podNetwork | default dict -}}
{{- range $path := prepend ($pn.ipamHostPaths | default list) ($pn.cniBinDir | default "/opt/cni/bin") -}}
{{- with include "rdma-cdi.under" (list (trimSuffix "/" $path) $sensitive) -}}
{{- fail (printf "podNetwork %q: it is %s or under it, which holds the node's secrets, processes, devices or runtime sockets; name the IPAM plugin's own directory" $path .) -}}
{{- end -}}
{{- end -}}
{{- /* Mounted read-write by the install step, and the agent reads its
config there: a directory of rdma-cdi's own, never a system one. Two levels
deep at least keeps out /etc, /opt, /usr and every other top directory. */ -}}
{{- $system := list "/var/lib" "/var/run" "/var/log" "/var/cache" "/var/tmp" "/usr/bin" "/usr/sbin" "/usr/lib" "/usr/lib32"
  "/usr/lib64" "/usr/libexec" "/usr/local" "/usr/share" "/usr/include" "/opt/cni" "/etc/cni" "/etc/cdi" "/etc/containerd" "/etc/crio" -}}
{{- range $key, $default := dict "binDir" "/opt/rdma-cdi/bin" "configDir" "/etc/rdma-cdi" -}}
{{- $raw := get $.Values.host $key -}}
{{- $dir := trimSuffix "/" $raw -}}
{{- $under := include "rdma-cdi.under" (list $dir $sensitive) -}}
{{- $why := "" -}}
{{- if contains ".." $dir -}}{{- $why = "it has .." -}}
{{- else if lt (len (splitList "/" (trimPrefix "/" $dir))) 2 -}}{{- $why = "it is a top-level directory" -}}
{{- else if has $dir $system -}}{{- $why = "it is a system directory" -}}
{{- else if $under -}}{{- $why = printf "it is %s or under it, which holds the node's secrets, devices or runtime sockets" $under -}}
{{- end -}}
{{- with $why -}}
{{- fail (printf "host.%s %q: %s; want a directory of rdma-cdi's own, two levels deep at least (the default %s): the install step mounts it read-write" $key $raw . $default) -}}
{{- end -}}
{{- end -}}
{{- /* Mounted read-write: the engines run the hooks a spec there names, as
root. Only the CDI directories the engines read. */ -}}
{{- $specDir := include "rdma-cdi.specDir" . -}}
{{- if or (contains ".." $specDir) (not (regexMatch "^/(etc|var/run|run)/cdi(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)*/?$" $specDir)) -}}
{{- fail (printf "config.cdi.spec_dir %q: want /etc/cdi, /var/run/cdi, /run/cdi or a directory under one of them: the agent mounts it read-write" $specDir) -}}
{{- end -}}
{{- /* Mounted read-write with nodeFeatureDiscovery.enabled: NFD's own
directory, the one path under /etc/kubernetes the agent may reach, or a
features.d of the operator's outside the sensitive paths. */ -}}
{{- $nfd := .Values.nodeFeatureDiscovery | default dict -}}
{{- if $nfd.enabled -}}
{{- $featuresDir := trimSuffix "/" ($nfd.featuresDir | default "") -}}
{{- with include "rdma-cdi.under" (list $featuresDir $sensitive) -}}
{{- if ne $featuresDir "/etc/kubernetes/node-feature-discovery/features.d" -}}
{{- fail (printf "nodeFeatureDiscovery.featuresDir %q: it is under %s, which holds the node's secrets, devices or runtime sockets; want NFD's /etc/kubernetes/node-feature-discovery/features.d or a features.d elsewhere: the agent mounts it read-write" $featuresDir .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* .Values.affinity with the control-plane exclusion in every required
node selector term. Helm replaces a list given in values rather than merge
it, so a user's nodeSelectorTerms would drop the default term; and the
terms are ORed, so the exclusion must be in each. A missing or null
affinity still gets it. */}}
{{- define "rdma-cdi.affinity" -}}
{{- $exclude := dict "key" "node-role.kubernetes.io/control-plane" "operator" "DoesNotExist" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $node := get $affinity "nodeAffinity" | default dict -}}
{{- $required := get $node "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range get $required "nodeSelectorTerms" | default list -}}
{{- $term := deepCopy . -}}
{{- $exprs := get $term "matchExpressions" | default list -}}
{{- if not (has $exclude $exprs) -}}
{{- $_ := set $term "matchExpressions" (append $exprs $exclude) -}}
{{- end -}}
{{- $terms = append $terms $term -}}
{{- end -}}
{{- if not $terms -}}
{{- $terms = list (dict "matchExpressions" (list $exclude)) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- toYaml $affinity -}}
{{- end -}}
