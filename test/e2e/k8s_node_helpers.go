package e2e

// A real single-node Kubernetes cluster for end-to-end tests: etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager, containerd 2.x
// (CRI; or CRI-O, KubeOptions.Runtime) and the kubelet, built by `make k8s`
// (KubeVersion), all on 127.0.0.1 inside a
// private mount and network namespace in which a fixture node is the host
// (see k8s_nodens_helpers.go). Pods go through the real API server with the
// built kubectl.
//
//	node := e2e.SharedFixtureNode(t, "seed002")
//	k := e2e.KubeNode(t, node, e2e.KubeOptions{})
//	k.InstallAgent(t, "dra", nil) // helm install of deploy/helm/rdma-cdi
//	k.WaitPod(t, ns, name, "Ready", time.Minute)
//
// There is no CNI plugin: the node stays NotReady (taint
// node.kubernetes.io/not-ready), so test pods need hostNetwork: true and
// tolerations: [{operator: Exists}]; a node started with
// KubeOptions.PodNetwork has a pod network (CNI bridge) instead, is Ready,
// and runs pods without either. ExecInPod and Logs go through the CRI
// API; kubectl exec/logs work too when the fixture has an IPv4 address (the
// node IP; they refuse a loopback one). A second node joins a node's
// control plane with KubeJoin (k8s_join_helpers.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

// Versions `make k8s` builds; the Makefile passes the same ones (and
// `make test-k8s-oldest` another Kubernetes) in the environment.
const (
	// DefaultKubeVersion is the newest Kubernetes release.
	DefaultKubeVersion = "v1.37.2"
	// DefaultEtcdVersion is the etcd that release ships with.
	DefaultEtcdVersion = "v3.7.0"
	// DefaultHelmVersion is the Helm that installs the chart.
	DefaultHelmVersion = "v4.3.1"
)

// KubeVersion is the Kubernetes the tests run: $RDMA_CDI_K8S_VERSION, or
// DefaultKubeVersion.
func KubeVersion() string { return envOr("RDMA_CDI_K8S_VERSION", DefaultKubeVersion) }

// KubeBinDir holds KubeVersion's kubelet, control plane and kubectl.
func KubeBinDir() string { return filepath.Join(enginesDir(), "k8s-"+KubeVersion()) }

// EtcdBinary is the etcd server `make k8s` built.
func EtcdBinary() string {
	return filepath.Join(enginesDir(), "etcd-"+envOr("RDMA_CDI_ETCD_VERSION", DefaultEtcdVersion), "etcd")
}

// HelmBinary is the helm `make k8s` built.
func HelmBinary() string {
	return filepath.Join(enginesDir(), "helm-"+envOr("RDMA_CDI_HELM_VERSION", DefaultHelmVersion), "helm")
}

// kubeBinaries are what `make k8s` puts in KubeBinDir().
var kubeBinaries = []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "kubectl"}

// KubeOptions tune a node started by KubeNode. Nodes are shared by the
// tests of a binary (under Main) that pass the same fixture and options.
type KubeOptions struct {
	// NodeName is the Node's name; default "node-" + the fixture's name.
	NodeName string
	// FeatureGates go to every component (--feature-gates and the
	// kubelet's featureGates), e.g. {"DRAExtendedResource": true}.
	FeatureGates map[string]bool
	// ExtraArgs are more flags per component: "kube-apiserver",
	// "kube-scheduler", "kube-controller-manager", "kubelet", "etcd".
	ExtraArgs map[string][]string
	// KubeletConfig is YAML appended to the KubeletConfiguration.
	KubeletConfig string
	// Images are docker-archive tars imported into containerd's k8s.io
	// namespace; the pause and bb images (Pause.Ref, BB.Ref) always are.
	// They are no reason for a node of its own: a shared node imports
	// those it lacks when a test asks for them.
	Images []string `json:"-"`
	// NUMANodes, when above 1, makes the node's /sys/devices/system/node
	// show that many NUMA nodes, the host's CPUs and memory split among
	// them (writeNUMATree): what the kubelet's Topology Manager learns
	// from cadvisor. Otherwise the node shows the host's.
	NUMANodes int `json:",omitempty"`
	// PodNetwork gives the node a pod network, as a CNI plugin of a real
	// cluster would: a conflist in its /etc/cni/net.d for the bridge
	// plugin (bridge cni0, the node's gateway address on it, host-local
	// IPAM on PodCIDR, no masquerade) that containerd's CRI plugin runs
	// from /usr/lib/cni (Debian's containernetworking-plugins), with the
	// IPAM state in a /var/lib/cni private to the node. The node becomes
	// Ready (no not-ready taint: KubeNode waits for it), and pods without
	// hostNetwork and without tolerations schedule and get an eth0 in
	// PodCIDR. It also turns containerd's NRI plugin on, listening on
	// /var/run/nri/nri.sock in the node (NRISocket). Off (the default),
	// the node is as described at the top of this file. The Node's
	// spec.podCIDR stays empty: nothing here reads it (the conflist names
	// the subnet; containerd takes the kubelet's pod CIDR only for a
	// conf_template, unset; no kube-proxy; the controller manager
	// allocates none without --allocate-node-cidrs).
	PodNetwork bool `json:",omitempty"`
	// PodCIDR is PodNetwork's pod subnet (IPv4; its first address is the
	// bridge's and the pods' default gateway); "" is DefaultPodCIDR. A
	// second node with a pod network may take another.
	PodCIDR string `json:",omitempty"`
	// Runtime is the kubelet's container runtime: "" or "containerd"
	// (containerd 2.x, as above) or "crio" (CRI-O, k8s_crio_node_helpers.go:
	// the same images in its storage, CDI, the same cgroup driver, and with
	// PodNetwork the same conflist and NRI socket). TestKubeDRAPodNetwork
	// and TestKubeCRIOPodNetwork run pod networking on each.
	Runtime string `json:",omitempty"`
	// Peers name the nodes that will join this node's control plane
	// (KubeJoin), in order: each gets a kubelet credential of its own and
	// a link to this node (peerLink), over which its kubelet reaches the
	// API server and its pods this node's pods. With peers the API server
	// listens on every address of the node's network namespace.
	Peers []string `json:",omitempty"`
	// ExtraHosts are lines ("IP NAME") added to the node's /etc/hosts.
	ExtraHosts []string `json:",omitempty"`
}

// DefaultPodCIDR is the pod subnet of a node with KubeOptions.PodNetwork.
const DefaultPodCIDR = "10.244.0.0/24"

// nriSocket is where containerd's NRI plugin listens in the node (its
// default): on the node's /run tmpfs, through the host's /var/run -> /run
// link (checkVarRun).
const nriSocket = "/var/run/nri/nri.sock"

func (o KubeOptions) key() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// KubeEnv is a running node. Paths under the node's namespace (its /sys,
// /var/run/cdi, /opt/rdma-cdi/bin, ...) are read from the test with
// NodePath.
type KubeEnv struct {
	Node       *FixtureNode
	NodeName   string
	NodeIP     string // --node-ip: the fixture's first IPv4 (default route's netdev first); "" if none
	Dir        string // scratch dir (certs, kubeconfigs, logs, containerd root)
	Kubeconfig string // admin (system:masters) kubeconfig; the server is reachable only in the node's netns
	Runtime    string // the CRI runtime's daemon: "containerd" or "crio" (KubeOptions.Runtime)
	Socket     string // the runtime's CRI socket
	PodCIDR    string // KubeOptions.PodNetwork's pod subnet; "" without a pod network (hostNetwork pods only)
	CRI        *CRIEnv
	BinDir     string // KubeBinDir(): kubelet, control plane, kubectl

	// apiServer is the API server's URL in this node's kubeconfigs: its
	// own 127.0.0.1, or the control node's end of the link (KubeJoin).
	apiServer string
	// control is the node whose control plane this one joined; nil on a
	// node that runs its own.
	control *KubeEnv
	// opts are the options the node was started with.
	opts KubeOptions

	holder   *exec.Cmd
	holderIn interface{ Close() error }
	pid      int

	mu       sync.Mutex
	procs    map[string]*KubeProc
	image    map[string]bool // images imported by RDMACDIImage, by archive digest
	archives map[string]bool // KubeOptions.Images imported, by archive path

	// admin is GetJSON's client, made once.
	adminOnce    sync.Once
	admin        *kubernetes.Clientset
	adminErr     error
	scraperToken string // MetricsToken's, made once
}

// KubeNode returns a node (control plane + kubelet + containerd) whose host
// is the fixture node, shared by the tests of the binary under Main; on a
// fixture node built for one test (NewFixtureNode) it is that test's, and
// stops when the test ends. It is skipped (fails in CI) when `make k8s` or
// `make engines-cdi` has not run.
func KubeNode(t testing.TB, node *FixtureNode, opts KubeOptions) *KubeEnv {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	RequireBinary(t, "nsenter")
	bin := KubeBinDir()
	for _, b := range kubeBinaries {
		RequireFile(t, filepath.Join(bin, b), "make k8s")
	}
	RequireFile(t, EtcdBinary(), "make k8s")
	if requireKubeRuntime(t, opts.Runtime) == runtimeContainerd {
		opts.Runtime = "" // one node for both spellings
	}
	if opts.PodNetwork && opts.PodCIDR == "" {
		opts.PodCIDR = DefaultPodCIDR // one node for both spellings
	}
	if opts.PodCIDR != "" {
		if !opts.PodNetwork {
			t.Fatalf("KubeOptions.PodCIDR %s without PodNetwork", opts.PodCIDR)
		}
		if _, err := podGateway(opts.PodCIDR); err != nil {
			t.Fatalf("KubeOptions.PodCIDR: %v", err)
		}
	}
	opts.FeatureGates = withoutDefaultGates(t, opts.FeatureGates)
	images := append([]string{Pause.DockerArchive(t), BB.DockerArchive(t)}, opts.Images...)
	k := GetOwned(t, node.owner, "kube\x00"+node.Dir+"\x00"+opts.key(), func(c Cleaner) (*KubeEnv, error) {
		start := time.Now()
		k, err := startKube(c, node, opts, bin, images, nil)
		if err == nil {
			t.Logf("kubernetes %s node %s up in %v (%s)", KubeVersion(), k.NodeName, time.Since(start).Round(100*time.Millisecond), k.Dir)
		}
		return k, err
	})
	k.importMissing(t, images)
	k.checkLeftoversAtEnd(t)
	return k
}

// gatesOnByDefault are feature gates on by default from the release
// named (its minor): asking for them there changes nothing, so it must
// not start a node of its own.
var gatesOnByDefault = map[string]int{"DRAExtendedResource": 36}

// withoutDefaultGates is gates less those set to what this release has
// by default, or nil when none is left (a new map: the caller's stays).
func withoutDefaultGates(t testing.TB, gates map[string]bool) map[string]bool {
	var out map[string]bool
	for gate, on := range gates {
		if since, ok := gatesOnByDefault[gate]; ok && on && KubeMinor(t) >= since {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[gate] = on
	}
	return out
}

// importMissing imports the archives among images that the node has not
// imported yet.
func (k *KubeEnv) importMissing(t testing.TB, images []string) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, archive := range images {
		if !k.archives[archive] {
			k.ImportImage(t, archive, "")
			k.archives[archive] = true
		}
	}
}

// KubeProc is a daemon run in the node's namespaces; it can be restarted.
type KubeProc struct {
	name   string
	args   []string // nsenter ... binary args
	Log    string   // its output
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts the daemon, its output appended to Log.
func (p *KubeProc) Start() error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== %s: start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(p.args[0], p.args[1:]...)
	// Scratch as working dir: nothing a daemon writes relative to it lands
	// on the host.
	cmd.Dir = p.dir
	// containerd finds its shim in PATH: the one built with it, not
	// Debian's containerd 1.x shim from docker.io's dependencies.
	cmd.Env = append(os.Environ(), "PATH="+EnginesBinDir()+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (stopped as one); killed with the test binary
	// should that die without running cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	return nil
}

// Running says whether the daemon runs.
func (p *KubeProc) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill ends the daemon's process group at once (SIGKILL), as a power cut.
func (p *KubeProc) kill() {
	if p.Running() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// Stop stops the daemon: SIGTERM, then SIGKILL after grace.
func (p *KubeProc) Stop(grace time.Duration) {
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

const (
	kubeAPIServer   = "https://127.0.0.1:6443"
	kubeAdminToken  = "rdma-cdi-e2e-admin"
	kubeletToken    = "rdma-cdi-e2e-kubelet"
	kubeServiceCIDR = "10.96.0.0/24"
)

// startKube starts a node: with its own control plane, or, when control
// is not nil, joined to control's (KubeJoin).
func startKube(c Cleaner, node *FixtureNode, opts KubeOptions, bin string, images []string, control *KubeEnv) (k *KubeEnv, err error) {
	dir, err := ScratchDir(c, "kube")
	if err != nil {
		return nil, err
	}
	k = &KubeEnv{
		Node: node, NodeName: opts.NodeName, Dir: dir, BinDir: bin,
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		apiServer:  kubeAPIServer, control: control, opts: opts,
		procs: map[string]*KubeProc{}, image: map[string]bool{}, archives: map[string]bool{},
	}
	if k.Runtime, err = kubeRuntime(opts.Runtime); err != nil {
		return nil, err
	}
	k.Socket = filepath.Join(dir, k.Runtime+".sock")
	if opts.PodNetwork {
		k.PodCIDR = opts.PodCIDR
	}
	if k.NodeName == "" {
		k.NodeName = "node-" + strings.ToLower(node.Name)
	}
	k.NodeIP = fixtureNodeIP(node.Topo)
	peerIndex := -1
	if control != nil {
		if peerIndex = slices.Index(control.opts.Peers, k.NodeName); peerIndex < 0 {
			return nil, fmt.Errorf("node %s is not among the peers %v of %s's control plane", k.NodeName, control.opts.Peers, control.NodeName)
		}
		controlEnd, _ := peerLink(peerIndex)
		k.apiServer = "https://" + controlEnd.Addr().String() + ":6443"
	}
	// One teardown, in order; registered before anything starts.
	c.Cleanup(k.teardown)
	for _, d := range []string{"logs", "pki", "kubelet", "varlogpods", "varlogcontainers", "etccdi", "rdmacdi-bin", "rdmacdi-etc", "etccni", "manifests", "ns", "varlibcni", "nri/plugins", "nri/conf.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := k.writeConfigs(opts); err != nil {
		return nil, err
	}
	var sysOwned map[string]string
	if opts.NUMANodes > 1 {
		if sysOwned, err = writeNUMATree(filepath.Join(dir, "numa"), opts.NUMANodes); err != nil {
			return nil, fmt.Errorf("NUMA nodes: %w", err)
		}
	}
	if err := k.startHolder(sysOwned); err != nil {
		return nil, err
	}
	if err := k.setupNetwork(); err != nil {
		return nil, err
	}
	if control != nil {
		if err := linkNodes(control, k, peerIndex); err != nil {
			return nil, err
		}
	}
	if k.PodCIDR != "" {
		if err := k.checkVarRun(); err != nil {
			return nil, err
		}
	}

	gates := featureGatesFlag(opts.FeatureGates)
	extra := func(name string) []string { return opts.ExtraArgs[name] }
	if control == nil {
		k.addControlPlane(opts, gates)
	}
	if k.Runtime == RuntimeCRIO {
		k.addProc(RuntimeCRIO, k.crioArgv())
	} else {
		k.addProc("containerd", []string{filepath.Join(EnginesBinDir(), "containerd"), "--config", filepath.Join(dir, "containerd.toml")})
	}
	for _, name := range []string{"etcd", k.Runtime, "kube-apiserver"} {
		if p := k.procs[name]; p != nil {
			if err := p.Start(); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	// Images while the API server comes up.
	if err := k.waitUp(k.Runtime, k.runtimeServes); err != nil {
		return nil, err
	}
	for _, img := range images {
		if err := k.importArchive(img); err != nil {
			return nil, err
		}
		k.archives[img] = true
	}
	if err := k.waitUp("kube-apiserver", func() error {
		out, _, err := k.Kubectl("get", "--raw=/readyz")
		if err == nil && strings.TrimSpace(out) != "ok" {
			err = fmt.Errorf("readyz: %s", out)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := k.checkServerVersion(); err != nil {
		return nil, err
	}

	if control == nil {
		k.addSchedulerAndControllers(opts, gates)
	}
	kubeletArgs := []string{filepath.Join(bin, "kubelet"),
		"--config=" + filepath.Join(dir, "kubelet.yaml"), "--kubeconfig=" + filepath.Join(dir, "kubelet.kubeconfig"),
		"--hostname-override=" + k.NodeName, "--v=2",
	}
	if k.NodeIP != "" {
		kubeletArgs = append(kubeletArgs, "--node-ip="+k.NodeIP)
	}
	k.addProc("kubelet", append(kubeletArgs, extra("kubelet")...))
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kubelet"} {
		if p := k.procs[name]; p != nil {
			if err := p.Start(); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.Cleanup(func() { conn.Close() })
	k.CRI = &CRIEnv{Runtime: runtimeapi.NewRuntimeServiceClient(conn), LogDir: filepath.Join(dir, "varlogpods"), Log: k.procs[k.Runtime].Log}
	if err := k.waitUp("kubelet", func() error {
		_, _, err := k.Kubectl("get", "node", k.NodeName)
		return err
	}); err != nil {
		return nil, err
	}
	// Pods need the default ServiceAccount (made by the controller manager).
	if err := k.waitUp("kube-controller-manager", func() error {
		_, _, err := k.Kubectl("get", "serviceaccount", "default", "-n", "default")
		return err
	}); err != nil {
		return nil, err
	}
	if k.PodCIDR != "" {
		// With a pod network the node is Ready: containerd reports
		// NetworkReady once it has loaded the conflist, the kubelet then
		// posts Ready, and the node lifecycle controller lifts the
		// not-ready taint.
		if err := k.waitUp("the node (Ready, untainted)", k.nodeReady); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// addControlPlane adds etcd and the API server (not started). With peers
// the API server listens on every address of the node's namespace, the
// links to its peers among them.
func (k *KubeEnv) addControlPlane(opts KubeOptions, gates []string) {
	extra := func(name string) []string { return opts.ExtraArgs[name] }
	dir, bin := k.Dir, k.BinDir
	bind := "127.0.0.1"
	if len(opts.Peers) > 0 {
		bind = "0.0.0.0"
	}
	k.addProc("etcd", append([]string{EtcdBinary(),
		"--name=node", "--data-dir=/run/kube-etcd",
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=node=http://127.0.0.1:2380", "--log-level=warn",
	}, extra("etcd")...))
	pki := func(f string) string { return filepath.Join(dir, "pki", f) }
	k.addProc("kube-apiserver", append([]string{filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=" + bind, "--advertise-address=127.0.0.1", "--secure-port=6443",
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"), "--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=" + kubeServiceCIDR,
		"--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--endpoint-reconciler-type=none", "--kubelet-preferred-address-types=InternalIP,Hostname", "--profiling=false", "--enable-priority-and-fairness=false",
	}, append(gates, extra("kube-apiserver")...)...))
}

// addSchedulerAndControllers adds the scheduler and the controller manager
// (not started).
func (k *KubeEnv) addSchedulerAndControllers(opts KubeOptions, gates []string) {
	extra := func(name string) []string { return opts.ExtraArgs[name] }
	bin := k.BinDir
	pki := func(f string) string { return filepath.Join(k.Dir, "pki", f) }
	k.addProc("kube-scheduler", append([]string{filepath.Join(bin, "kube-scheduler"),
		"--kubeconfig=" + k.Kubeconfig, "--authentication-kubeconfig=" + k.Kubeconfig, "--authorization-kubeconfig=" + k.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
	}, append(gates, extra("kube-scheduler")...)...))
	k.addProc("kube-controller-manager", append([]string{filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig=" + k.Kubeconfig, "--authentication-kubeconfig=" + k.Kubeconfig, "--authorization-kubeconfig=" + k.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
		"--service-account-private-key-file=" + pki("sa.key"), "--root-ca-file=" + pki("ca.crt"),
		"--use-service-account-credentials=false", "--service-cluster-ip-range=" + kubeServiceCIDR,
	}, append(gates, extra("kube-controller-manager")...)...))
}

// podGateway is the first address of an IPv4 pod subnet: the bridge's
// and the pods' default gateway.
func podGateway(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !p.Addr().Is4() || p != p.Masked() || p.Bits() > 30 {
		return netip.Addr{}, fmt.Errorf("pod subnet %s: want an IPv4 network address with a prefix of /30 or shorter", cidr)
	}
	return p.Addr().Next(), nil
}

// PodGateway is the pods' default gateway (the first address of PodCIDR,
// on the node's bridge cni0); "" without a pod network.
func (k *KubeEnv) PodGateway() string {
	if k.PodCIDR == "" {
		return ""
	}
	gw, _ := podGateway(k.PodCIDR)
	return gw.String()
}

// NRISocket returns the runtime's NRI socket (/var/run/nri/nri.sock in the
// node) as the test process reaches it (NodePath); "" when the node's NRI
// is off (it is on with KubeOptions.PodNetwork). The runtime makes it when
// it starts, so it exists once KubeNode returns.
func (k *KubeEnv) NRISocket() string {
	if k.PodCIDR == "" {
		return ""
	}
	return k.NodePath(nriSocket)
}

// checkVarRun: /var/run in the node is the link to /run (its tmpfs) that
// the host has, so what containerd puts under /var/run (the NRI socket,
// the pods' network namespaces in /var/run/netns) is the node's alone and
// NodePath finds it.
func (k *KubeEnv) checkVarRun() error {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/root/var/run", k.pid))
	if err == nil && !filepath.IsAbs(l) {
		l = filepath.Join("/var", l)
	}
	if err != nil || filepath.Clean(l) != "/run" {
		return fmt.Errorf("a pod network needs /var/run to be a link to /run (the node's tmpfs); it is not (%q, %v)", l, err)
	}
	return nil
}

// nodeStatus is what nodeReady reads of the Node.
type nodeStatus struct {
	Spec struct {
		Taints []struct {
			Key    string `json:"key"`
			Effect string `json:"effect"`
		} `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

// nodeReady is nil when the Node's Ready condition is True and it has no
// taint; else an error that says what is missing.
func (k *KubeEnv) nodeReady() error {
	out, err := k.GetJSON("/api/v1/nodes/" + k.NodeName)
	if err != nil {
		return err
	}
	var n nodeStatus
	if err := json.Unmarshal(out, &n); err != nil {
		return err
	}
	ready := "no Ready condition"
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			if c.Status == "True" {
				ready = ""
			} else {
				ready = fmt.Sprintf("Ready is %s (%s: %s)", c.Status, c.Reason, c.Message)
			}
		}
	}
	if ready != "" {
		return fmt.Errorf("node %s: %s", k.NodeName, ready)
	}
	if len(n.Spec.Taints) > 0 {
		var ts []string
		for _, t := range n.Spec.Taints {
			ts = append(ts, t.Key+":"+t.Effect)
		}
		return fmt.Errorf("node %s is Ready but has taints %s", k.NodeName, strings.Join(ts, ", "))
	}
	return nil
}

// WaitNodeReady waits up to timeout until the Node is Ready and has no
// taint (as a node with KubeOptions.PodNetwork is), and fails the test
// with the node's description and the daemons' logs otherwise.
func (k *KubeEnv) WaitNodeReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := WaitFor(context.Background(), timeout, k.nodeReady); err != nil {
		out, _, _ := k.Kubectl("describe", "node", k.NodeName)
		t.Fatalf("node not Ready and untainted after %v: %v\n%s\n%s", timeout, err, out, k.logTails(3000))
	}
}

// checkServerVersion: the API server is the release the tests asked for.
func (k *KubeEnv) checkServerVersion() error {
	out, _, err := k.Kubectl("version", "-o", "json")
	if err != nil {
		return err
	}
	var v struct {
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return fmt.Errorf("kubectl version: %w", err)
	}
	if v.ServerVersion.GitVersion != KubeVersion() {
		return fmt.Errorf("the API server is %s, not %s", v.ServerVersion.GitVersion, KubeVersion())
	}
	return nil
}

func (k *KubeEnv) addProc(name string, argv []string) {
	args := append([]string{"nsenter", "--target", strconv.Itoa(k.pid), "--mount", "--net", "--"}, argv...)
	k.procs[name] = &KubeProc{name: name, args: args, Log: filepath.Join(k.Dir, "logs", name+".log"), dir: k.Dir}
}

// StartDaemon runs argv in the node's namespaces as the daemon name (its
// log beside the kubelet's) until the test ends.
func (k *KubeEnv) StartDaemon(t testing.TB, name string, argv ...string) {
	t.Helper()
	k.addProc(name, argv)
	p := k.procs[name]
	if err := p.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		delete(k.procs, name)
	})
}

// waitUp polls ready for up to 90 s; a daemon that exits fails at once.
func (k *KubeEnv) waitUp(name string, ready func() error) error {
	err := WaitFor(context.Background(), 90*time.Second, func() error {
		for n, p := range k.procs {
			if p.cmd != nil && !p.Running() {
				return errExited{n}
			}
		}
		return ready()
	})
	var ex errExited
	if errors.As(err, &ex) {
		return fmt.Errorf("%s exited:\n%s", ex.name, TailFile(k.procs[ex.name].Log, 4000))
	}
	if err != nil {
		return fmt.Errorf("%s did not come up: %v\n%s", name, err, k.logTails(3000))
	}
	return nil
}

type errExited struct{ name string }

func (e errExited) Error() string { return e.name + " exited" }

// logTails returns the end of every daemon's log.
func (k *KubeEnv) logTails(n int) string {
	var names []string
	for name := range k.procs {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "---- %s log (%s):\n%s\n", name, k.procs[name].Log, TailFile(k.procs[name].Log, n))
	}
	return b.String()
}

// startHolder re-executes the test binary in new mount and network
// namespaces to set up the node's mounts and hold the namespaces; sysOwned
// are dirs of its /sys shown from elsewhere alone (nodeInitConfig).
func (k *KubeEnv) startHolder(sysOwned map[string]string) error {
	node := k.Node
	cfg := nodeInitConfig{
		Scratch:    filepath.Join(k.Dir, "ns"),
		FixtureSys: node.Sys, FixtureDev: node.Dev, SysOwned: sysOwned,
		Tmpfs: []string{"/run"},
		Dirs:  []string{"/run/cdi", "/run/lock"},
		Binds: map[string]string{
			"/var/lib/kubelet":    filepath.Join(k.Dir, "kubelet"),
			"/var/log/pods":       filepath.Join(k.Dir, "varlogpods"),
			"/var/log/containers": filepath.Join(k.Dir, "varlogcontainers"),
			"/etc/cdi":            filepath.Join(k.Dir, "etccdi"),
			"/etc/cni/net.d":      filepath.Join(k.Dir, "etccni"),
			"/etc/rdma-cdi":       filepath.Join(k.Dir, "rdmacdi-etc"),
			"/opt/rdma-cdi/bin":   filepath.Join(k.Dir, "rdmacdi-bin"),
			"/etc/kubernetes":     filepath.Join(k.Dir, "manifests"),
		},
		Shadows: map[string]string{
			// kubelet's kernel tunables, as it wants them (see k8s_nodens_helpers.go)
			"/proc/sys/vm/overcommit_memory":      "1",
			"/proc/sys/vm/panic_on_oom":           "0",
			"/proc/sys/kernel/panic":              "10",
			"/proc/sys/kernel/panic_on_oops":      "1",
			"/proc/sys/kernel/keys/root_maxkeys":  "1000000",
			"/proc/sys/kernel/keys/root_maxbytes": "25000000",
			// no DNS server in the node's network: fail fast
			"/etc/resolv.conf": "nameserver 127.0.0.1",
			"/etc/hosts":       k.hostsFile(),
		},
	}
	if k.PodCIDR != "" {
		// host-local's leases (/var/lib/cni/networks) and libcni's cached
		// results (/var/lib/cni/results): the node's own.
		cfg.Binds["/var/lib/cni"] = filepath.Join(k.Dir, "varlibcni")
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), nodeInitEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("node namespace holder: %w", err)
	}
	pw.Close()
	k.holder, k.holderIn, k.pid = cmd, in, cmd.Process.Pid
	// Until "ready", then drain (the holder writes nothing more).
	line := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			out.Write(buf[:n])
			if strings.Contains(out.String(), "ready\n") {
				line <- nil
				_, _ = bytes.NewBuffer(nil).ReadFrom(pr)
				pr.Close()
				return
			}
			if err != nil {
				line <- fmt.Errorf("node namespace holder: %s", strings.TrimSpace(out.String()))
				pr.Close()
				return
			}
		}
	}()
	select {
	case err := <-line:
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("node namespace holder: no answer in 60 s: %s", out.String())
	}
}

func (k *KubeEnv) hostsFile() string {
	s := "127.0.0.1 localhost\n::1 localhost\n"
	if k.NodeIP != "" {
		s += k.NodeIP + " " + k.NodeName + "\n"
	}
	for _, l := range k.opts.ExtraHosts {
		s += l + "\n"
	}
	return s
}

// fixtureNodeIP is the node's InternalIP: the first IPv4 of the netdev with
// the default route, else of any netdev made in the namespace.
func fixtureNodeIP(topo fixture.Topology) string {
	first := ""
	for _, n := range topo.NetDevs {
		if !n.CreateInNetNS() {
			continue
		}
		for _, a := range n.Addrs {
			p, err := netip.ParsePrefix(a)
			if err != nil || !p.Addr().Is4() {
				continue
			}
			if n.DefaultRoute {
				return p.Addr().String()
			}
			if first == "" {
				first = p.Addr().String()
			}
			break
		}
	}
	return first
}

// setupNetwork creates the fixture's netdevs (veths, addresses, default
// route) and lo in the node's network namespace.
func (k *KubeEnv) setupNetwork() error {
	ns, err := netns.GetFromPid(k.pid)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := fixture.SetupNetNS(k.Node.Topo, h); err != nil {
		return fmt.Errorf("fixture netdevs in the node's network namespace: %w", err)
	}
	return k.routeKubernetesService()
}

// routeKubernetesService stands in for kube-proxy, for the one Service a
// node agent needs: the API server's ClusterIP (10.96.0.1:443, what
// in-cluster clients get in KUBERNETES_SERVICE_HOST) is DNATed to its
// 127.0.0.1:6443 in the node's network namespace (on a node that joined
// another's control plane, to the API server's end of their link).
func (k *KubeEnv) routeKubernetesService() error {
	out, err := k.InNode("iptables", "-t", "nat", "-A", "OUTPUT", "-d", "10.96.0.1/32", "-p", "tcp", "--dport", "443",
		"-j", "DNAT", "--to-destination", strings.TrimPrefix(k.apiServer, "https://")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables DNAT for the kubernetes Service: %v: %s", err, out)
	}
	return nil
}

// DialContext dials addr (e.g. "127.0.0.1:6443") from inside the node's
// network namespace, for Go clients of the node's servers (client-go's
// rest.Config.Dial). The socket keeps its namespace after the dial.
func (k *KubeEnv) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return k.DialFrom(ctx, netip.Addr{}, network, addr)
}

// DialFrom is DialContext from the local address src (a loopback address
// other than 127.0.0.1 is another client to a server); the zero Addr lets
// the kernel choose.
func (k *KubeEnv) DialFrom(ctx context.Context, src netip.Addr, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := k.inNetNS(func() error {
		var d net.Dialer
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// SendUevent broadcasts, in the node's network namespace where the agent
// listens, the uevent the kernel sends when a device of subsystem at
// devpath (under /sys, e.g. "/devices/.../infiniband/mlx5_1") is added or
// removed: a fixture's sysfs changed by hand makes none.
func (k *KubeEnv) SendUevent(action, devpath, subsystem, name string) error {
	msg := fmt.Sprintf("%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=%s\x00NAME=%s\x00", action, devpath, action, devpath, subsystem, name)
	return k.inNetNS(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
		if err != nil {
			return fmt.Errorf("uevent socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte(msg), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
			return fmt.Errorf("sending the uevent %s@%s: %w", action, devpath, err)
		}
		return nil
	})
}

// inNetNS runs fn on a thread of its own in the node's network namespace;
// sockets fn makes keep that namespace.
func (k *KubeEnv) inNetNS(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPid(k.pid)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and exits with the goroutine
		ch <- err
	}()
	return <-ch
}

// NodePath returns where the test process reads path of the node's mount
// namespace (through /proc/PID/root of the namespace holder), e.g.
// k.NodePath("/var/run/cdi/rdma.example.com-hca.yaml"). Symlinks among the
// parent dirs are resolved inside the node's root (the kernel would resolve
// an absolute one such as /var/run -> /run against the test's own root); the
// last component is left as is (os.Readlink, os.Lstat see it).
func (k *KubeEnv) NodePath(path string) string {
	root := fmt.Sprintf("/proc/%d/root", k.pid)
	rest := strings.Split(strings.Trim(filepath.Clean("/"+path), "/"), "/")
	cur := ""
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir("/" + cur)
			continue
		}
		next := cur + "/" + name
		target, err := os.Readlink(root + next)
		if err != nil || hops > 40 || len(rest) == 0 {
			cur = next // not a symlink (or missing: the rest is kept as is)
			continue
		}
		hops++
		if filepath.IsAbs(target) {
			cur = ""
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return root + filepath.Clean("/"+cur)
}

// InNode returns cmd run in the node's mount and network namespaces
// (nsenter), not started.
func (k *KubeEnv) InNode(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(k.pid), "--mount", "--net", "--", name}, args...)...)
	cmd.Dir = "/"
	return cmd
}

// Restart stops the node's daemon name (kubelet or the runtime, k.Runtime),
// runs whileDown (when not nil), starts the daemon again and waits until it
// serves: the kubelet's health endpoint, the runtime's API.
func (k *KubeEnv) Restart(t testing.TB, name string, whileDown func()) {
	t.Helper()
	k.mu.Lock()
	p := k.procs[name]
	p.Stop(30 * time.Second)
	k.mu.Unlock()
	if whileDown != nil {
		whileDown()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := k.waitUp(name, k.serving(t, name)); err != nil {
		t.Fatal(err)
	}
}

// serving is the check that the node's daemon name serves.
func (k *KubeEnv) serving(t testing.TB, name string) func() error {
	switch name {
	case "kubelet":
		return func() error {
			_, _, err := Run(k.InNode("/bin/busybox", "wget", "-q", "-O", "-", "http://127.0.0.1:10248/healthz"))
			return err
		}
	case k.Runtime:
		return k.runtimeServes
	case "kube-controller-manager":
		return func() error { // its secure port accepts once its controllers run
			c, err := k.DialFrom(context.Background(), netip.Addr{}, "tcp", "127.0.0.1:10257")
			if err == nil {
				c.Close()
			}
			return err
		}
	}
	t.Fatalf("no readiness check for %s", name)
	return nil
}

// runtimeServes: the node's runtime answers on its API.
func (k *KubeEnv) runtimeServes() error {
	if k.Runtime == RuntimeCRIO {
		return k.crioServes()
	}
	_, _, err := k.ctr("version")
	return err
}

// RebootNode does to the node what a power cut and a boot do, but to the
// control plane, which in a cluster runs on other machines (here it shares
// the node's namespaces and its etcd data lives in /run/kube-etcd): the
// kubelet, containerd and every process of the node's pods are killed
// (SIGKILL), the mounts under /run and the pods' volume mounts go, /run is
// emptied, beforeBoot runs (it may leave files, as a spec dir that
// persists would hold them), and containerd and the kubelet start again.
func (k *KubeEnv) RebootNode(t testing.TB, beforeBoot func()) {
	t.Helper()
	k.mu.Lock()
	keep := map[int]bool{}
	for name, p := range k.procs {
		switch {
		case name == "kubelet" || name == k.Runtime:
			p.kill()
		case p.Running():
			keep[p.cmd.Process.Pid] = true
		}
	}
	k.killInNamespaces(keep)
	// mountinfo also lists the host's mounts below /run that the node's
	// /run tmpfs covers (podman's /run/netns, once podman has run a
	// container on the host): their paths name no mount in the node
	// (or another one: containerd's /run/netns dir of a PodNetwork node),
	// and umount (and mountpoint, which reads mountinfo too) cannot tell.
	// A lazy umount fails only where the path is no mount point (EINVAL)
	// or is gone (ENOENT), never for a busy mount, so its failures are
	// ignored; rm --one-file-system still stops at any mount left.
	const wipe = `awk '{print $5}' /proc/self/mountinfo | grep -E '^/run/|^/var/lib/kubelet/pods/' | grep -v '^/run/kube-etcd' |
	sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
find /run -mindepth 1 -maxdepth 1 ! -name kube-etcd -exec rm -rf --one-file-system {} +
mkdir -p /run/lock`
	if out, se, err := Run(k.InNode("/bin/sh", "-ec", wipe)); err != nil {
		k.mu.Unlock()
		t.Fatalf("emptying the node's /run: %v\n%s%s", err, out, se)
	}
	k.mu.Unlock()
	if beforeBoot != nil {
		beforeBoot()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// The runtime first: the kubelet exits when no runtime answers. waitUp
	// would fail on the kubelet, not running yet.
	rt := k.procs[k.Runtime]
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	if err := WaitFor(context.Background(), 90*time.Second, k.runtimeServes); err != nil {
		t.Fatalf("%s after the reboot: %v\n%s", k.Runtime, err, TailFile(rt.Log, 3000))
	}
	if err := k.procs["kubelet"].Start(); err != nil {
		t.Fatal(err)
	}
	if err := k.waitUp("kubelet", k.serving(t, "kubelet")); err != nil {
		t.Fatal(err)
	}
}

// KubeletLog returns the kubelet's log (all its runs).
func (k *KubeEnv) KubeletLog() string {
	b, _ := os.ReadFile(k.procs["kubelet"].Log)
	return string(b)
}

// teardown stops everything in order: the kubelet (so nothing restarts),
// the pods (CRI), the control plane and containerd, then whatever is left
// in the node's namespaces, then the holder.
func (k *KubeEnv) teardown() {
	if p := k.procs["kubelet"]; p != nil {
		p.Stop(20 * time.Second)
	}
	if k.CRI != nil && k.procs[k.Runtime].Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if resp, err := k.CRI.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, s := range resp.Items {
				_, _ = k.CRI.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
				_, _ = k.CRI.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
			}
		}
		cancel()
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kube-apiserver", k.Runtime, "etcd"} {
		if p := k.procs[name]; p != nil {
			p.Stop(20 * time.Second)
		}
	}
	if k.pid != 0 {
		k.killNamespaceStragglers()
	}
	if k.holder != nil {
		k.holderIn.Close()
		done := make(chan struct{})
		go func() { _ = k.holder.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = k.holder.Process.Kill()
			<-done
		}
	}
}

// killNamespaceStragglers SIGKILLs the processes left in the node's mount
// or network namespace (shims, hostNetwork containers), found by their
// namespace links, never by name; the holder is left to exit on its own.
func (k *KubeEnv) killNamespaceStragglers() { k.killInNamespaces(nil) }

// killInNamespaces kills (SIGKILL) every process in the node's mount or
// network namespace, or in a pod network namespace of the node (the
// containers of pods without hostNetwork, KubeOptions.PodNetwork), but the
// holder, this test binary and keep's.
func (k *KubeEnv) killInNamespaces(keep map[int]bool) {
	self := func(kind string) string {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", k.pid, kind))
		return l
	}
	mnt, nets := self("mnt"), self("net")
	if mnt == "" || nets == "" {
		return
	}
	podNets := k.podNetNamespaces()
	for range 3 {
		ents, _ := os.ReadDir("/proc")
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == k.pid || pid == os.Getpid() || keep[pid] {
				continue
			}
			m, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
			n, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
			if m == mnt || n == nets || podNets[n] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				found = true
			}
		}
		if !found {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podNetNamespaces are the network namespaces containerd made for the
// node's pods (bind mounts in the node's /var/run/netns), as
// /proc/PID/ns/net names them ("net:[INODE]"). The pods' processes are in
// neither the node's mount nor its network namespace.
func (k *KubeEnv) podNetNamespaces() map[string]bool {
	const nsfsMagic = 0x6e736673 // NSFS_MAGIC, linux/magic.h
	dir := k.NodePath("/var/run/netns")
	ents, _ := os.ReadDir(dir)
	nets := map[string]bool{}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var fs syscall.Statfs_t
		var st syscall.Stat_t
		// Only a mounted namespace (nsfs), not the empty file under it.
		if syscall.Statfs(p, &fs) == nil && fs.Type == nsfsMagic && syscall.Stat(p, &st) == nil {
			nets[fmt.Sprintf("net:[%d]", st.Ino)] = true
		}
	}
	return nets
}

// Proc is the node's daemon name (kubelet, containerd, kube-apiserver, or
// one a test started with StartDaemon); nil when there is none.
func (k *KubeEnv) Proc(name string) *KubeProc {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.procs[name]
}

// PID is the pid of the process holding the node's namespaces.
func (k *KubeEnv) PID() int { return k.pid }
