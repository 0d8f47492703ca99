package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DefaultWhereaboutsVersion is the Makefile's WHEREABOUTS_VERSION.
const DefaultWhereaboutsVersion = "v0.9.2"

// WhereaboutsDir is where `make k8s` builds Whereabouts: its binary, its
// CRDs and its install manifest.
func WhereaboutsDir() string {
	return filepath.Join(enginesDir(), "whereabouts-"+envOr("RDMA_CDI_WHEREABOUTS_VERSION", DefaultWhereaboutsVersion))
}

// Whereabouts is Whereabouts installed as its own manifest installs it,
// without its DaemonSet: the CRDs, its service account in kube-system with
// its cluster role, and on the host the directory a DaemonSet would fill
// on each node (/etc/cni/net.d/whereabouts.d): a kubeconfig with the
// service account's token, and the flat configuration file that names it
// (whereabouts.conf, which Whereabouts requires; an IPAM config's
// configuration_path names it where it is not in the default place).
type Whereabouts struct {
	// BinDir holds a copy of the whereabouts binary.
	BinDir string
	// ConfDir holds whereabouts.kubeconfig and whereabouts.conf (Conf).
	ConfDir, Conf string
}

// InstallWhereabouts installs Whereabouts on k's control plane for the
// test (removed at its end).
func InstallWhereabouts(t testing.TB, k *KubeEnv) Whereabouts {
	t.Helper()
	dir := WhereaboutsDir()
	RequireFile(t, filepath.Join(dir, "whereabouts"), "make k8s")
	// The CRDs go with the test, deleted as kubectl deletes a CRD (a
	// foreground cascade waits on its instances' cleanup for minutes).
	crds := []string{"ippools", "overlappingrangeipreservations"}
	for _, crd := range crds {
		k.MustKubectl(t, "apply", "-f", filepath.Join(dir, "whereabouts.cni.cncf.io_"+crd+".yaml"))
	}
	t.Cleanup(func() {
		for _, crd := range crds {
			k.MustKubectl(t, "delete", "crd", crd+".whereabouts.cni.cncf.io", "--ignore-not-found", "--timeout=2m")
		}
	})
	var docs []string
	install, err := os.ReadFile(filepath.Join(dir, "daemonset-install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(install), "\n---") {
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				docs = append(docs, doc)
			}
		}
	}
	k.Apply(t, strings.Join(docs, "\n---\n"))
	for _, crd := range crds {
		k.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+crd+".whereabouts.cni.cncf.io")
	}
	// The kubeconfig names the kubernetes Service's address, as
	// Whereabouts' installer does: every node reaches the API server there
	// (routeKubernetesService), and they share this file.
	token := strings.TrimSpace(k.MustKubectl(t, "create", "token", "whereabouts", "-n", "kube-system", "--duration=2h"))
	// Both directories outside the engines' cache in /root, which the
	// chart refuses to mount (the node's secrets), and named without a
	// test's characters, which it refuses too.
	var bin, conf string
	for _, d := range []*string{&bin, &conf} {
		if *d, err = os.MkdirTemp("", "rdma-cdi-e2e-whereabouts-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(*d) })
	}
	// The binary, and the cluster's CA beside the kubeconfig, which names
	// it by its path in the agent's container.
	for _, c := range []struct {
		src, dst string
		mode     os.FileMode
	}{
		{filepath.Join(dir, "whereabouts"), filepath.Join(bin, "whereabouts"), 0o755},
		{filepath.Join(k.controlDir(), "pki", "ca.crt"), filepath.Join(conf, "ca.crt"), 0o644},
	} {
		b, rerr := os.ReadFile(c.src)
		err = errors.Join(err, rerr, os.WriteFile(c.dst, b, c.mode))
	}
	for _, d := range []string{bin, conf} {
		err = errors.Join(err, os.Chmod(d, 0o755))
	}
	if err != nil {
		t.Fatal(err)
	}
	w := Whereabouts{BinDir: bin, ConfDir: conf, Conf: filepath.Join(conf, "whereabouts.conf")}
	// No namespace in its context: Whereabouts keeps its pools and lease in
	// kube-system then.
	kubeconfigPath := filepath.Join(conf, "whereabouts.kubeconfig")
	kc := kubeconfig("https://10.96.0.1:443", filepath.Join(conf, "ca.crt"), token)
	flat := `{"datastore": "kubernetes", "kubernetes": {"kubeconfig": "` + kubeconfigPath + `"}}`
	if err := errors.Join(os.WriteFile(kubeconfigPath, []byte(kc), 0o600), os.WriteFile(w.Conf, []byte(flat), 0o644)); err != nil {
		t.Fatal(err)
	}
	return w
}

// controlDir is the directory of k's control plane (its PKI).
func (k *KubeEnv) controlDir() string {
	if k.control != nil {
		return k.control.Dir
	}
	return k.Dir
}
