package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rdma-cdi/rdma-cdi/pkg/metricsauth"
)

// Clientset is a client-go client with the node's admin kubeconfig, dialing
// into the node's network namespace (the only place the API server listens).
// Each call makes its own connection pool, as separate nodes would have.
func (k *KubeEnv) Clientset(tb testing.TB) *kubernetes.Clientset {
	tb.Helper()
	return k.ClientsetAs(tb, "")
}

// GetJSON reads an API path (as `kubectl get --raw` would) as the admin,
// with query parameters as name, value pairs. The waits poll with it: a
// kubectl process per poll cost about 0.3 s of CPU, and a 2-CPU machine
// waiting on pods spent a good part of its time starting kubectl.
func (k *KubeEnv) GetJSON(path string, query ...string) ([]byte, error) {
	k.adminOnce.Do(func() {
		cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
		if err != nil {
			k.adminErr = err
			return
		}
		cfg.Dial = k.DialContext
		k.admin, k.adminErr = kubernetes.NewForConfig(cfg)
	})
	if k.adminErr != nil {
		return nil, k.adminErr
	}
	req := k.admin.CoreV1().RESTClient().Get().AbsPath(path)
	for i := 0; i+1 < len(query); i += 2 {
		req = req.Param(query[i], query[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := req.DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s %v: %w", path, query, err)
	}
	return b, nil
}

// ClientsetAs is a client of the API server as token's user ("" the admin
// of Kubeconfig), through the node's network namespace.
func (k *KubeEnv) ClientsetAs(tb testing.TB, token string) *kubernetes.Clientset {
	tb.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Dial = k.DialContext
	if token != "" {
		// The admin's client certificate would authenticate first.
		cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
		cfg.BearerToken = token
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// metricsScraper is the service account the tests scrape the agent as,
// bound to the chart's metrics-reader role by name, so that it holds across
// installs and uninstalls of the release.
const metricsScraper = "metrics-scraper"

// MetricsToken is a token of a service account bound to the chart's
// <release>-metrics-reader ClusterRole, as a cluster's Prometheus is.
func (k *KubeEnv) MetricsToken(t testing.TB) string {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.scraperToken == "" {
		manifest := fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s}
subjects: [{kind: ServiceAccount, name: %[1]s, namespace: default}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s-metrics-reader}
`, metricsScraper, AgentRelease)
		if out, se, err := Run(k.KubectlCmd([]byte(manifest), "apply", "-f", "-")); err != nil {
			t.Fatalf("the metrics scraper's account: %v\n%s%s", err, out, se)
		}
		k.scraperToken = strings.TrimSpace(k.MustKubectl(t, "create", "token", metricsScraper, "-n", "default", "--duration=2h", "--audience="+metricsauth.Audience))
	}
	return k.scraperToken
}

// RandomJWT is a token of a JSON Web Token's form, for name, that no API
// server issued: what a client flooding the metrics endpoint sends.
func RandomJWT(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"flood"}`)) + "." + enc([]byte(`{"sub":"`+name+`"}`)) + "." + enc([]byte("not signed: "+name))
}

// RenewedMetricsToken is a new token of MetricsToken's account, as the
// kubelet hands a scraper when it renews its projected token.
func (k *KubeEnv) RenewedMetricsToken(t testing.TB) string {
	t.Helper()
	k.MetricsToken(t)
	return strings.TrimSpace(k.MustKubectl(t, "create", "token", metricsScraper, "-n", "default", "--duration=2h", "--audience="+metricsauth.Audience))
}
