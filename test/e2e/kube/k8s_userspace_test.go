package kube

// End-to-end tests of the per-container RDMA user space: an
// image that carries its own stack runs it byte for byte, an image without
// one gets the host's matched set, on every engine the spec serves.

import (
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/test/e2e"
)

// Through Kubernetes: the own-stack image and a stack-less one as pods
// asking rdma/hca: 1 from the device plugin, and through a ResourceClaim
// from the DRA driver, on seed 002's node with the shipped DaemonSets.
func TestKubeUserSpace(t *testing.T) {
	node := e2e.SharedFixtureNode(t, "seed002")
	for _, tc := range []struct {
		name            string
		start           func(*testing.T) *e2e.KubeEnv
		podSpec, limits string
		setup           func(*testing.T, *e2e.KubeEnv, string)
	}{
		{
			name:   "device plugin",
			start:  func(t *testing.T) *e2e.KubeEnv { return devicePluginNode(t, node, "1000", "8") },
			limits: "\n      resources:\n        limits:\n          " + e2e.SharedResource + ": 1",
		},
		{
			name:    "DRA",
			start:   func(t *testing.T) *e2e.KubeEnv { return e2e.DRANode(t, node, 9) },
			podSpec: "\n  resourceClaims:\n    - name: rdma\n      resourceClaimTemplateName: one-hca",
			limits:  "\n      resources:\n        claims:\n          - name: rdma",
			setup:   func(t *testing.T, k *e2e.KubeEnv, ns string) { k.Apply(t, exampleTemplates(t, ns)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.start(t)
			k.ImportImage(t, e2e.OwnStack.DockerArchive(t), e2e.OwnStack.Ref)
			ns := e2e.UniqueID("userspace-")
			k.Apply(t, e2e.NamespaceManifest(ns))
			if tc.setup != nil {
				tc.setup(t, k, ns)
			}
			k.Apply(t, e2e.PodManifest(ns, "own", e2e.OwnStack, tc.podSpec, tc.limits)+"---\n"+e2e.PodManifest(ns, "lent", e2e.Glibc, tc.podSpec, tc.limits))
			for _, pod := range []struct {
				name  string
				check func(*testing.T, string, string)
			}{{"own", e2e.CheckOwnStack}, {"lent", e2e.CheckLent}} {
				k.WaitPod(t, ns, pod.name, "Ready", 2*time.Minute)
				pod.check(t, tc.name+" pod", k.MustExecInPod(t, ns, pod.name, "main", "/bin/sh", "-c", e2e.StackProbe))
			}
		})
	}
}
