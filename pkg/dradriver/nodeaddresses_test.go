package dradriver

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func nodeWithAddresses(addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: addrs}}
}

// Round 3, L2: only InternalIP (later ExternalIP too) counted as the
// Node's. Every address the Node lists that is an IP counts, whatever its
// type: a kubelet run with --hostname-override=<its IP> lists that address
// as its Hostname. DNS names are not addresses.
func TestNodeAddressesOfEveryType(t *testing.T) {
	client := fake.NewClientset(nodeWithAddresses(
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "node-a.internal"},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::5"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "10.1.0.5"},
	))
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Client: client})
	if err := d.readNodeIPs(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("2001:db8::5"), netip.MustParseAddr("10.1.0.5")}
	if !d.nodeIPsKnown || !slices.Equal(d.nodeIPs, want) {
		t.Fatalf("the Node's addresses %v (known %v), want %v", d.nodeIPs, d.nodeIPsKnown, want)
	}
}

// Round 3, L2: a failed read kept the last addresses for as long as the
// API server failed, however stale. Three failed reads in a row (90 s)
// forget them: no netdev is moved into a pod until a read succeeds again.
func TestNodeAddressesForgottenAfterFailedReads(t *testing.T) {
	client := fake.NewClientset(nodeWithAddresses(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}))
	d := newDriver(t, Options{Name: testDriver, NodeName: "node-a", Client: client})
	ctx := context.Background()
	if err := d.readNodeIPs(ctx); err != nil || !d.nodeIPsKnown {
		t.Fatalf("first read: %v, known %v", err, d.nodeIPsKnown)
	}
	down := true
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return down, nil, errors.New("the API server is down")
	})
	for i := range 3 {
		if err := d.readNodeIPs(ctx); err == nil {
			t.Fatalf("read %d succeeded against a failing API server", i+2)
		}
		if i < 2 && !d.nodeIPsKnown {
			t.Fatalf("forgotten after %d failed reads; one missed read should not stop moves", i+1)
		}
	}
	if d.nodeIPsKnown {
		t.Fatalf("the Node's addresses %v still known after three failed reads", d.nodeIPs)
	}
	down = false
	if err := d.readNodeIPs(ctx); err != nil || !d.nodeIPsKnown {
		t.Fatalf("a read once the API server is back: %v, known %v", err, d.nodeIPsKnown)
	}
}
