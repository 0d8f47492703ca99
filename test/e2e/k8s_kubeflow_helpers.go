package e2e

// What seed002's PyTorchJob needs around a KubeNode besides the node agent:
// Kubeflow's training operator (the PyTorchJob controller and its
// validating webhook), CoreDNS (the operator's init container waits until
// the master's name resolves) and a scheduler that serves the pods'
// schedulerName, volcano. All run as processes in the node's namespaces,
// built by `make k8s` (TrainingOperatorDir, CoreDNSBinary).
//
//	StartCoreDNS(t, k, "127.0.0.1")
//	StartVolcanoStandIn(t, k, nil)
//	StartTrainingOperator(t, k, BB.Ref)
//	WaitPyTorchJob(t, k, ns, name, "Succeeded", 5*time.Minute)

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Versions `make k8s` builds; the Makefile passes the same ones in the
// environment.
const (
	// DefaultTrainingOperatorVersion is Kubeflow's training operator.
	DefaultTrainingOperatorVersion = "v1.9.2"
	// DefaultCoreDNSVersion is the cluster DNS.
	DefaultCoreDNSVersion = "v1.14.7"
)

// TrainingOperatorDir holds the training operator `make k8s` built
// (training-operator.v1) and the PyTorchJob CRD of the same module
// (kubeflow.org_pytorchjobs.yaml).
func TrainingOperatorDir() string {
	return filepath.Join(enginesDir(), "training-operator-"+envOr("RDMA_CDI_TRAINING_OPERATOR_VERSION", DefaultTrainingOperatorVersion))
}

// CoreDNSBinary is the coredns `make k8s` built.
func CoreDNSBinary() string {
	return filepath.Join(enginesDir(), "coredns-"+envOr("RDMA_CDI_COREDNS_VERSION", DefaultCoreDNSVersion), "coredns")
}

// requireNewDaemon fails when the node already runs a daemon of that name:
// a second StartDaemon would take its log and its ports.
func requireNewDaemon(t testing.TB, k *KubeEnv, name string) {
	t.Helper()
	if p := k.procs[name]; p != nil && p.Running() {
		t.Fatalf("node %s already runs %s (one per node at a time)", k.NodeName, name)
	}
}

// StartCoreDNS runs CoreDNS on listen (an IP address of the node), port
// 53, in k's node namespaces until the test ends, answering the zone
// cluster.local from k's API server as a cluster's DNS add-on does: a
// Service's name gives its ClusterIP, a headless Service's name the
// addresses of its ready pods (how a PyTorchJob's pods find the master,
// through the headless Service the operator makes for it). Nothing is
// forwarded: a name outside cluster.local gets SERVFAIL, so pods never
// reach the host's resolvers. On 127.0.0.1 it also answers the node's own
// processes (the node's /etc/resolv.conf names 127.0.0.1). It returns once
// a query for the kubernetes Service answers its ClusterIP: that Service
// has no endpoints here (the API server runs with
// --endpoint-reconciler-type=none), but its A record exists.
func StartCoreDNS(t testing.TB, k *KubeEnv, listen string) {
	t.Helper()
	bin := RequireFile(t, CoreDNSBinary(), "make k8s")
	if _, err := netip.ParseAddr(listen); err != nil {
		t.Fatalf("StartCoreDNS: listen %q is not an IP address: %v", listen, err)
	}
	const name = "coredns"
	requireNewDaemon(t, k, name)
	// The admin kubeconfig: its server (127.0.0.1:6443) is reachable from
	// the node's network namespace, where CoreDNS runs.
	conf := fmt.Sprintf(`.:53 {
    bind %s
    errors
    kubernetes cluster.local {
        kubeconfig %s
    }
}
`, listen, k.Kubeconfig)
	corefile := filepath.Join(k.Dir, "coredns.Corefile")
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	clusterIP := strings.TrimSpace(k.MustKubectl(t, "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"))
	if clusterIP == "" {
		t.Fatal("the kubernetes Service has no ClusterIP")
	}
	k.StartDaemon(t, name, bin, "-conf", corefile)
	// Until the kubernetes plugin has synced with the API server (it starts
	// serving after 5 s regardless) the answer is SERVFAIL.
	const query = "kubernetes.default.svc.cluster.local"
	if err := k.waitUp(name, func() error {
		out, se, err := Run(k.InNode("/bin/busybox", "nslookup", "-type=a", query, listen))
		if err != nil {
			return fmt.Errorf("nslookup %s %s: %v\n%s%s", query, listen, err, out, se)
		}
		if !slices.Contains(strings.Fields(out), clusterIP) {
			return fmt.Errorf("nslookup %s %s: no %s in the answer:\n%s", query, listen, clusterIP, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// VolcanoSchedulerName is the schedulerName StartVolcanoStandIn serves.
const VolcanoSchedulerName = "volcano"

// volcanoStandInPort is the stand-in's secure port: the node's own
// kube-scheduler has 10259, the controller manager 10257.
const volcanoStandInPort = "10261"

// StartVolcanoStandIn runs, in k's node namespaces until the test ends, a
// second kube-scheduler whose only profile is schedulerName volcano, with
// gates as its feature gates. seed002's pods name that scheduler, which
// the node's default scheduler leaves alone (their pods would stay
// Pending). It stands in for Volcano, whose module the Go module proxy
// refuses (volcano.sh/volcano), and does no gang scheduling: it places
// each pod on its own as the default scheduler would, so a job's pods may
// start one by one. It returns once its /readyz says ok, which
// kube-scheduler does only after its informers' event handlers have synced
// (the sched-handler-sync check in cmd/kube-scheduler/app/server.go of
// k8s.io/kubernetes), that is once it schedules.
func StartVolcanoStandIn(t testing.TB, k *KubeEnv, gates map[string]bool) {
	t.Helper()
	const name = "volcano-scheduler"
	requireNewDaemon(t, k, name)
	cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %s
profiles:
- schedulerName: %s
`, k.Kubeconfig, VolcanoSchedulerName)
	cfgPath := filepath.Join(k.Dir, "volcano-scheduler.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	k.StartDaemon(t, name, append([]string{filepath.Join(k.BinDir, "kube-scheduler"),
		"--config=" + cfgPath,
		"--authentication-kubeconfig=" + k.Kubeconfig, "--authorization-kubeconfig=" + k.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + volcanoStandInPort,
	}, featureGatesFlag(gates)...)...)
	// Its serving certificate is self-signed in memory (no --cert-dir):
	// nothing to verify it against, and /readyz is all that is read.
	tr := &http.Transport{DialContext: k.DialContext, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	if err := k.waitUp(name, func() error {
		resp, err := client.Get("https://127.0.0.1:" + volcanoStandInPort + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s: %s", resp.Status, body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The training operator's names. Its webhook Secret and
// ValidatingWebhookConfiguration names are its defaults
// (cmd/training-operator.v1/main.go of github.com/kubeflow/training-operator
// v1.9.2): it updates both but creates neither. Its namespace is
// pkg/cert's default (MY_POD_NAMESPACE unset).
const (
	trainingOperatorNamespace  = "kubeflow"
	trainingOperatorSecret     = "training-operator-webhook-cert"
	trainingOperatorWebhookCfg = "validator.training-operator.kubeflow.org"
	trainingOperatorWebhook    = "validator.pytorchjob.training-operator.kubeflow.org"
	trainingOperatorService    = "training-operator" // --webhook-service-name; there is no such Service
	// TrainingOperatorWebhookHost is the name the API server calls the
	// operator's webhook by: <--webhook-service-name>.<namespace>.svc, the
	// DNS name the operator's cert rotator puts in its serving certificate.
	// The node's /etc/hosts must map it to 127.0.0.1 (the operator listens
	// in the node's network namespace, where the API server runs).
	TrainingOperatorWebhookHost = trainingOperatorService + "." + trainingOperatorNamespace + ".svc"
	trainingOperatorWebhookPort = "19443"
)

// trainingOperatorObjects are what a deployment of the operator brings
// besides its Deployment: the namespace, the empty Secret its cert rotator
// fills, and the ValidatingWebhookConfiguration the rotator injects its CA
// into (the operator's manifests/base/webhook/manifests.yaml, for
// pytorchjobs alone, with a URL for the Service that is not there).
var trainingOperatorObjects = fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Secret
metadata:
  name: %[2]s
  namespace: %[1]s
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %[3]s
webhooks:
- name: %[4]s
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://%[5]s:%[6]s/validate-kubeflow-org-v1-pytorchjob
  failurePolicy: Fail
  sideEffects: None
  rules:
  - apiGroups: [kubeflow.org]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [pytorchjobs]
`, trainingOperatorNamespace, trainingOperatorSecret, trainingOperatorWebhookCfg, trainingOperatorWebhook,
	TrainingOperatorWebhookHost, trainingOperatorWebhookPort)

// pytorchInitContainerTemplate is the operator's own init container
// (pkg/controller.v1/pytorch/initcontainer.go: wait until the master's name
// resolves, MaxTries times 2 s) given as the template file a deployment of
// the operator mounts from a ConfigMap (--pytorch-init-container-template-file),
// with one change: the answer is read from nslookup's output, not its exit
// status. busybox 1.35's nslookup (the BB image's) asks for the name in every
// search domain of the pod's resolv.conf and exits 1 when any of them has no
// such name, also when one of them answered, so the default loop would never
// see the master.
const pytorchInitContainerTemplate = `
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}} 2>/dev/null | grep -q "^Name:"; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
`

// trainingOperatorScript runs in the operator's own mount namespace
// (unshare): $1/k8s-webhook-server is bound on /tmp/k8s-webhook-server, so
// the fixed cert dir of its pkg/cert (/tmp/k8s-webhook-server/serving-certs,
// also controller-runtime's default under os.TempDir()) is the test's and
// no other operator's, while the rest of /tmp (the node's kubeconfigs) stays
// in view. The namespace variables would move it out of kubeflow or narrow
// its watch.
const trainingOperatorScript = `mkdir -p /tmp/k8s-webhook-server
mount --bind "$1/k8s-webhook-server" /tmp/k8s-webhook-server
shift
unset MY_POD_NAMESPACE KUBEFLOW_NAMESPACE TMPDIR
exec "$@"`

// StartTrainingOperator runs Kubeflow's training operator in k's node
// namespaces until the test ends, for PyTorchJobs alone, its PyTorch init
// containers on initImage (it runs nslookup; the default image, alpine,
// is not on the node). It applies the PyTorchJob CRD and the objects a
// deployment of the operator brings (trainingOperatorObjects) and deletes
// them at the end. The node's /etc/hosts must map
// TrainingOperatorWebhookHost to 127.0.0.1. The operator sets up its
// controllers only once its cert rotator has put a serving certificate in
// the Secret, found it mounted in its cert dir and injected the CA into
// the webhook configuration (ensureReady in
// github.com/open-policy-agent/cert-controller v0.12.0's
// pkg/rotator/rotator.go); the rotator writes no files, a pod's Secret
// volume does, so here the test copies the Secret into the cert dir. It
// returns once the PyTorchJob controller's workers have started and the
// API server gets answers from the webhook, and fails with the operator's
// log otherwise, after 2 minutes at most.
func StartTrainingOperator(t testing.TB, k *KubeEnv, initImage string) {
	t.Helper()
	dir := TrainingOperatorDir()
	bin := RequireFile(t, filepath.Join(dir, "training-operator.v1"), "make k8s")
	crd := RequireFile(t, filepath.Join(dir, "kubeflow.org_pytorchjobs.yaml"), "make k8s")
	RequireBinary(t, "unshare")
	if initImage == "" {
		t.Fatal("StartTrainingOperator: no init container image")
	}
	const name = "training-operator"
	requireNewDaemon(t, k, name)

	// Server-side: the CRD is larger than the last-applied annotation a
	// client-side apply would store on it. Deleted last, after the webhook
	// configuration (cleanups run in reverse).
	if _, se, err := k.Kubectl("apply", "--server-side", "-f", crd); err != nil {
		t.Fatalf("kubectl apply --server-side -f %s: %v\n%s", crd, err, se)
	}
	t.Cleanup(func() {
		if _, se, err := k.Kubectl("delete", "crd", "pytorchjobs.kubeflow.org", "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("deleting the PyTorchJob CRD: %v\n%s", err, se)
		}
	})
	// Polled: kubectl wait fails at once on a CRD without conditions yet.
	if err := WaitFor(context.Background(), time.Minute, func() error {
		out, se, err := k.Kubectl("get", "crd", "pytorchjobs.kubeflow.org", "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		if err == nil && strings.TrimSpace(out) != "True" {
			err = fmt.Errorf("condition Established is %q", out)
		}
		if err != nil {
			return fmt.Errorf("%v %s", err, se)
		}
		return nil
	}); err != nil {
		t.Fatalf("PyTorchJob CRD not Established: %v", err)
	}
	k.Apply(t, trainingOperatorObjects)

	tmp := filepath.Join(k.Dir, "training-operator-tmp")
	certDir := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	// No certificate of an earlier run: the rotator would take it for
	// mounted and the webhook server would serve it.
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	initTemplate := filepath.Join(tmp, "initContainer.yaml")
	if err := os.WriteFile(initTemplate, []byte(pytorchInitContainerTemplate), 0o644); err != nil {
		t.Fatal(err)
	}

	// Flags of cmd/training-operator.v1/main.go, but --kubeconfig:
	// controller-runtime's pkg/client/config registers it.
	k.StartDaemon(t, name, "unshare", "--mount", "--", "/bin/sh", "-ec", trainingOperatorScript, "sh", tmp,
		bin,
		"--kubeconfig="+k.Kubeconfig,
		"--enable-scheme=pytorchjob",
		"--pytorch-init-container-image="+initImage,
		"--pytorch-init-container-template-file="+initTemplate,
		"--metrics-bind-address=127.0.0.1:18080",
		"--health-probe-bind-address=127.0.0.1:18081",
		"--webhook-server-port="+trainingOperatorWebhookPort,
		"--webhook-service-name="+trainingOperatorService,
	)
	p := k.procs[name]
	exited := false
	err := WaitFor(context.Background(), 2*time.Minute, func() error {
		if !p.Running() {
			exited = true
			return nil
		}
		if err := syncWebhookCert(k, certDir); err != nil {
			return err
		}
		if !pyTorchWorkersStarted(currentRun(p.Log)) {
			return errors.New(`no "Starting workers" of pytorchjob-controller in its log yet`)
		}
		return webhookAnswers(k)
	})
	if exited {
		t.Fatalf("the training operator exited:\n%s", TailFile(p.Log, 6000))
	}
	if err != nil {
		t.Fatalf("the training operator is not ready after 2m: %v\n---- its log (%s):\n%s", err, p.Log, TailFile(p.Log, 6000))
	}
}

// syncWebhookCert does what the kubelet does for the operator's pod, whose
// Secret volume is mounted on the cert dir: it writes the Secret's serving
// certificate and key into dir once the rotator has put them there, and
// again whenever they change.
func syncWebhookCert(k *KubeEnv, dir string) error {
	out, se, err := k.Kubectl("get", "secret", trainingOperatorSecret, "-n", trainingOperatorNamespace, "-o", "json")
	if err != nil {
		return fmt.Errorf("kubectl get secret %s: %v: %s", trainingOperatorSecret, err, se)
	}
	var s struct {
		Data map[string][]byte `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return fmt.Errorf("secret %s: %w", trainingOperatorSecret, err)
	}
	crt, key := s.Data["tls.crt"], s.Data["tls.key"]
	if len(crt) == 0 || len(key) == 0 {
		return fmt.Errorf("the cert rotator has not filled Secret %s/%s yet", trainingOperatorNamespace, trainingOperatorSecret)
	}
	// The key first: the rotator waits for tls.crt alone.
	for _, f := range []struct {
		name string
		data []byte
	}{{"tls.key", key}, {"tls.crt", crt}} {
		path := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := os.WriteFile(path+".new", f.data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(path+".new", path); err != nil {
			return err
		}
	}
	return nil
}

// currentRun is the part of a daemon's log written since its last start:
// the log file gathers every run of the node's daemon of that name.
func currentRun(log string) string {
	b, _ := os.ReadFile(log)
	s := string(b)
	if i := strings.LastIndex(s, "==== "); i >= 0 {
		return s[i:]
	}
	return s
}

// pyTorchWorkersStarted: the log has controller-runtime's "Starting
// workers" (pkg/internal/controller/controller.go of
// sigs.k8s.io/controller-runtime v0.19.1, the operator's) for the
// controller named pytorchjob-controller (pkg/controller.v1/pytorch of the
// operator), which controller.New adds to its log lines as
// "controller". The operator logs as zap's development console: a tab
// before the message, its fields as JSON after it.
func pyTorchWorkersStarted(log string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, "Starting workers") && strings.Contains(line, `"pytorchjob-controller"`) {
			return true
		}
	}
	return false
}

// webhookProbe is a PyTorchJob the operator's webhook refuses (no container
// named pytorch) but the CRD's schema accepts: sent with a server-side dry
// Run, the refusal shows that the API server reached the webhook (name,
// port, the injected CA) and that the webhook validates.
var webhookProbe = fmt.Sprintf(`apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: webhook-probe
  namespace: %s
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: probe
            image: probe
`, trainingOperatorNamespace)

// webhookAnswers is nil once the webhook refuses webhookProbe.
func webhookAnswers(k *KubeEnv) error {
	_, se, err := Run(k.KubectlCmd([]byte(webhookProbe), "create", "--dry-run=server", "-f", "-"))
	if err == nil {
		return fmt.Errorf("the API server took the probe PyTorchJob without %s refusing it", trainingOperatorWebhook)
	}
	if !strings.Contains(se, fmt.Sprintf("admission webhook %q denied the request", trainingOperatorWebhook)) {
		return fmt.Errorf("the API server gets no answer from the webhook at https://%s:%s (the node's /etc/hosts must map %s to 127.0.0.1): %s",
			TrainingOperatorWebhookHost, trainingOperatorWebhookPort, TrainingOperatorWebhookHost, strings.TrimSpace(se))
	}
	return nil
}

// PyTorchJobCondition is one of a PyTorchJob's status conditions: Created,
// Running, Restarting, Succeeded, Failed, Suspended.
type PyTorchJobCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// readPyTorchJobConditions returns PyTorchJob ns/name's status conditions.
func readPyTorchJobConditions(k *KubeEnv, ns, name string) ([]PyTorchJobCondition, error) {
	out, err := k.GetJSON("/apis/kubeflow.org/v1/namespaces/" + ns + "/pytorchjobs/" + name)
	if err != nil {
		return nil, err
	}
	var job struct {
		Status struct {
			Conditions []PyTorchJobCondition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &job); err != nil {
		return nil, fmt.Errorf("pytorchjob %s/%s: %w", ns, name, err)
	}
	return job.Status.Conditions, nil
}

func conditionStatus(conds []PyTorchJobCondition) map[string]string {
	m := map[string]string{}
	for _, c := range conds {
		m[c.Type] = c.Status
	}
	return m
}

// WaitPyTorchJob waits until PyTorchJob ns/name's condition is True. It
// fails the test with the job's description and its pods when the time
// runs out, or at once when the job has finished (Failed or Succeeded)
// without it: a finished job's conditions no longer change.
func WaitPyTorchJob(t testing.TB, k *KubeEnv, ns, name, condition string, timeout time.Duration) {
	t.Helper()
	var conds []PyTorchJobCondition
	var err error
	why := fmt.Sprintf("not %s after %v", condition, timeout)
	for deadline := time.Now().Add(timeout); ; {
		conds, err = readPyTorchJobConditions(k, ns, name)
		if err == nil {
			st := conditionStatus(conds)
			if st[condition] == "True" {
				return
			}
			if st["Failed"] == "True" || st["Succeeded"] == "True" {
				why = fmt.Sprintf("finished without %s", condition)
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pytorchjob %s/%s: %s (last error %v); conditions:\n", ns, name, why, err)
	for _, c := range conds {
		fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	b.WriteString(k.Describe(ns, "pytorchjob", name))
	pods, se, perr := k.Kubectl("get", "pods", "-n", ns, "-l", "training.kubeflow.org/job-name="+name, "-o", "wide")
	fmt.Fprintf(&b, "---- its pods:\n%s%s", pods, se)
	if perr != nil {
		fmt.Fprintf(&b, "(%v)\n", perr)
	}
	if p := k.procs["training-operator"]; p != nil {
		fmt.Fprintf(&b, "---- training operator log (%s):\n%s\n", p.Log, TailFile(p.Log, 4000))
	}
	t.Fatal(b.String())
}
