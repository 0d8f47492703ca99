package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"k8s.io/client-go/rest"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// Outside the cluster (no node name or namespace) static ranges are used
// as they are, with a warning that nothing keeps another node off them;
// pools, which only the cluster can share out, stop the start.
func TestStartPodAddressesOutsideTheCluster(t *testing.T) {
	log, hook := test.NewNullLogger()
	pn := config.Default().PodNetwork
	r, err := podnetwork.ParseRange("10.0.61.200-10.0.61.220")
	if err != nil {
		t.Fatal(err)
	}
	pn.Ranges = config.PodNetworkRanges{"eth1": {r}}
	for _, k := range []PodAddressNode{{}, {Node: "a"}, {Namespace: "rdma-cdi"}} {
		hook.Reset()
		addrs, renew, err := StartPodAddresses(context.Background(), pn, k, log)
		if err != nil || addrs != nil || renew != nil {
			t.Fatalf("%+v: %v, %v, %v; want the static ranges left to the networker", k, addrs, renew != nil, err)
		}
		if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || !strings.Contains(e.Message, "not registered") {
			t.Errorf("%+v: log %v, want a warning that the ranges are not registered", k, e)
		}
	}
	if err := pn.Pools.UnmarshalText([]byte("10.0.61.0/25")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := StartPodAddresses(context.Background(), pn, PodAddressNode{Node: "a"}, log); err == nil || !strings.Contains(err.Error(), "--namespace") {
		t.Errorf("pools without a namespace: %v", err)
	}
	// In the cluster, an API server that cannot be reached stops the start.
	_, _, err = StartPodAddresses(context.Background(), pn, PodAddressNode{Node: "a", Namespace: "rdma-cdi",
		Config: &rest.Config{Host: "http://127.0.0.1:1"}}, log)
	if err == nil || !strings.Contains(err.Error(), "reading node a") {
		t.Errorf("no API server: %v", err)
	}
}
