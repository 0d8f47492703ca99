package e2e

// The files a KubeNode's control plane and kubelet start from: the PKI,
// tokens and kubeconfigs, the kubelet and containerd configs, feature gates.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// writeConfigs writes the PKI, tokens, kubeconfigs and the runtime's
// (containerd's or CRI-O's) and the kubelet's configs under k.Dir.
func (k *KubeEnv) writeConfigs(opts KubeOptions) error {
	pki := filepath.Join(k.Dir, "pki")
	if err := k.writePKI(pki); err != nil {
		return err
	}
	// Each node's kubelet has its own credential (the Node authorizer
	// lets it see its own pods and claims only).
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", kubeAdminToken)
	for _, node := range append([]string{k.NodeName}, opts.Peers...) {
		tokens += fmt.Sprintf("%s,system:node:%s,system:node:%s,\"system:nodes\"\n", kubeletTokenOf(node), node, node)
	}
	// The kubelet's server listens on the node IP, where the API server's
	// kubectl exec/logs/port-forward reach it (they refuse a loopback node
	// IP). Anonymous and always allowed: only this private network
	// namespace can reach it.
	kubeletAddr := "127.0.0.1"
	if k.NodeIP != "" {
		kubeletAddr = k.NodeIP
	}
	// Without a pod network NRI is off and the CRI plugin finds no CNI
	// config (the node stays NotReady). With one, NRI is on and the CRI
	// plugin runs Debian's CNI plugins on the conflist written below.
	// CRI-O's config says the same (writeCRIOConfig).
	disabled, cri := []string{`"io.containerd.nri.v1.nri"`}, criPluginConfig(Pause.Ref)
	if k.PodCIDR != "" {
		conflist, err := podNetworkConflist(k.PodCIDR)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(k.Dir, "etccni", podNetworkConflistName), conflist, 0o644); err != nil {
			return err
		}
		disabled = nil
		cri += criCNIConfig([]string{cniBinDir}, "/etc/cni/net.d") + nriPluginConfig(nriSocket, filepath.Join(k.Dir, "nri"))
	}
	files := map[string]string{
		"tokens.csv":         tokens,
		"admin.kubeconfig":   kubeconfig(k.apiServer, filepath.Join(pki, "ca.crt"), kubeAdminToken),
		"kubelet.kubeconfig": kubeconfig(k.apiServer, filepath.Join(pki, "ca.crt"), kubeletTokenOf(k.NodeName)),
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# 1.35+ refuses cgroup v1 (these machines) unless told otherwise.
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
staticPodPath: /etc/kubernetes
resolvConf: /etc/resolv.conf
oomScoreAdj: 0
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
  imagefs.inodesFree: "1%%"
serializeImagePulls: false
# A pod whose NodePrepareResources failed is retried at the kubelet's next
# sync of it, not on a backoff: the default minute would be most of what
# the fault tests wait (the agent is back within a second).
syncFrequency: 10s
rotateCertificates: false
makeIPTablesUtilChains: false
%s%s`, kubeletAddr, filepath.Join(pki, "ca.crt"), k.Socket, kubeletGates(opts.FeatureGates), opts.KubeletConfig),
	}
	if k.Runtime == RuntimeCRIO {
		if err := k.writeCRIOConfig(); err != nil {
			return err
		}
	} else {
		files["containerd.toml"] = containerdConfig(filepath.Join(k.Dir, "containerd-root"), filepath.Join(k.Dir, "containerd-state"), k.Socket,
			disabled, cri)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(k.Dir, name), []byte(data), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// cniBinDir holds the CNI plugins of Debian's containernetworking-plugins
// (test/e2e/deps.sh): bridge, host-local, loopback, ...
const cniBinDir = "/usr/lib/cni"

// podNetworkConflistName is the pod network's file in the node's
// /etc/cni/net.d (the scratch dir etccni).
const podNetworkConflistName = "10-e2e-pods.conflist"

// podNetworkConflist is KubeOptions.PodNetwork's CNI config: the bridge
// plugin makes bridge cni0 in the node's network namespace with the
// subnet's first address (isGateway), joins each pod to it with a veth
// whose pod end is eth0, and host-local gives that an address of the
// subnet and a default route via the bridge. No masquerade (ipMasq: no
// iptables rules in the node) and no hairpin. The pod's lo needs no entry:
// containerd's CRI plugin adds a loopback network of its own (go-cni's
// WithLoNetwork, which runs the loopback plugin from the same bin_dirs;
// use_internal_loopback = false, the default, in containerd 2.4).
//
// The node's /sys/class/net is the fixture's static tree
// (k8s_nodens_helpers.go): cni0 and the veths never show there. None of
// these plugins reads it: bridge and host-local work through netlink and
// the network namespace's own /proc/sys/net (ip_forward, accept_dad,
// arp_notify, disable_ipv6); the only sysfs read in the netlink library
// they link (/sys/class/net/IF/tun_flags, owner, group) is for tun/tap
// links, which a bridge setup never deserializes. Inside the pod's network
// namespace runc mounts a fresh sysfs, which shows the pod's own netdevs.
func podNetworkConflist(cidr string) ([]byte, error) {
	gw, err := podGateway(cidr)
	if err != nil {
		return nil, err
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "e2e-pods",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": false,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": cidr, "gateway": gw.String()}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// nriPluginConfig turns containerd's NRI plugin on (config version 3,
// containerd 2.x) with its socket at socket (in the node's mount
// namespace) and the dirs of the plugins it would start itself, and their
// configs, under dir (the node's scratch dir, empty: not the host's
// /opt/nri/plugins and /etc/nri/conf.d).
func nriPluginConfig(socket, dir string) string {
	return fmt.Sprintf(`
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %q
  plugin_path = %q
  plugin_config_path = %q
`, socket, filepath.Join(dir, "plugins"), filepath.Join(dir, "conf.d"))
}

// kubeletTokenOf is node's kubelet's bearer token.
func kubeletTokenOf(node string) string { return kubeletToken + "-" + node }

// writePKI writes the cluster's PKI into dir: all of it on a node that runs
// its control plane, the CA certificate alone on one that joined another's.
func (k *KubeEnv) writePKI(dir string) error {
	if k.control != nil {
		ca, err := os.ReadFile(filepath.Join(k.control.Dir, "pki", "ca.crt"))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600)
	}
	var linkIPs []net.IP
	for i := range k.opts.Peers {
		controlEnd, _ := peerLink(i)
		linkIPs = append(linkIPs, controlEnd.Addr().AsSlice())
	}
	return writeKubePKI(dir, linkIPs)
}

func kubeconfig(server, ca, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    token: %s
contexts:
- name: local
  context:
    cluster: local
    user: user
current-context: local
`, server, ca, token)
}

func sortedGates(g map[string]bool) []string {
	var s []string
	for name, on := range g {
		s = append(s, fmt.Sprintf("%s=%v", name, on))
	}
	sort.Strings(s)
	return s
}

func featureGatesFlag(g map[string]bool) []string {
	if len(g) == 0 {
		return nil
	}
	return []string{"--feature-gates=" + strings.Join(sortedGates(g), ",")}
}

func kubeletGates(g map[string]bool) string {
	if len(g) == 0 {
		return ""
	}
	s := "featureGates:\n"
	for _, kv := range sortedGates(g) {
		name, val, _ := strings.Cut(kv, "=")
		s += fmt.Sprintf("  %s: %s\n", name, val)
	}
	return s
}

// writeKubePKI writes a CA, the API server's serving certificate (for
// 127.0.0.1, more IPs and the kubernetes service names) and the
// service-account key pair, all ECDSA P-256.
func writeKubePKI(dir string, moreIPs []net.IP) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rdma-cdi-e2e-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, moreIPs...),
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	keyPEM := func(k *ecdsa.PrivateKey) ([]byte, error) {
		der, err := x509.MarshalECPrivateKey(k)
		return pemOf("EC PRIVATE KEY", der), err
	}
	srvKeyPEM, err := keyPEM(srvKey)
	if err != nil {
		return err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"ca.crt": pemOf("CERTIFICATE", caDER), "apiserver.crt": pemOf("CERTIFICATE", srvDER), "apiserver.key": srvKeyPEM,
		"sa.key": saKeyPEM, "sa.pub": pemOf("PUBLIC KEY", saPub),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
