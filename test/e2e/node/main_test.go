// Package node is the single-node suite: podman, runc, Docker, containerd
// and CRI-O with the CDI spec, the hooks, the runtime wrapper, the user
// space, watch, systemd, the packages and the chart's rendering, on fixture
// nodes (test/e2e's framework); no Kubernetes control plane.
package node
