package e2e

import (
	"path/filepath"
	"testing"
)

// DefaultNFDVersion is the Makefile's NFD_VERSION.
const DefaultNFDVersion = "v0.18.2"

// NFDFeaturesDir is where NFD's worker reads feature files (its local
// source's fixed directory), on the node as the chart mounts it.
const NFDFeaturesDir = "/etc/kubernetes/node-feature-discovery/features.d"

// NFDDir is where `make k8s` builds NFD's worker and master, with the
// NodeFeature CRDs.
func NFDDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(enginesDir(), "nfd-"+envOr("RDMA_CDI_NFD_VERSION", DefaultNFDVersion))
	RequireFile(t, filepath.Join(dir, "nfd-worker"), "make k8s")
	return dir
}

// StartNFD runs NFD on k as its deployment does, as processes in the
// node's namespaces with the admin kubeconfig: its CRDs applied, the
// master (labeling Nodes from NodeFeature objects, with its default
// label namespace rules) for the test, and the worker once, with its local
// source alone (the feature files), publishing this node's NodeFeature in
// namespace nfd.
func (k *KubeEnv) StartNFD(t testing.TB) {
	t.Helper()
	dir := NFDDir(t)
	k.MustKubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "nfd-api-crds.yaml"))
	k.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/nodefeatures.nfd.k8s-sigs.io")
	k.Apply(t, NamespaceManifest("nfd"))
	// The master runs on a node of its own (NODE_NAME), as its pod does.
	k.StartDaemon(t, "nfd-master", "env", "NODE_NAME="+k.NodeName, filepath.Join(dir, "nfd-master"), "-kubeconfig", k.Kubeconfig, "-port=18080")
	if out, se, err := Run(k.InNode("env", "NODE_NAME="+k.NodeName, "KUBERNETES_NAMESPACE=nfd", filepath.Join(dir, "nfd-worker"),
		"-kubeconfig", k.Kubeconfig, "-oneshot", "-port=18081", "-no-owner-refs", "-feature-sources=local", "-label-sources=local")); err != nil {
		t.Fatalf("nfd-worker: %v\n%s%s", err, out, se)
	}
}
