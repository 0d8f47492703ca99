package v1alpha1

import (
	"fmt"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, raw, wantErr string
	}{
		{"ok", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"move","interfaceName":"roce0","addresses":["10.0.61.20/24"],"mtu":4200,"routes":[{"destination":"10.0.0.0/8","gateway":"10.0.61.1"}]}`, ""},
		{"unknown field", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","ipam":"dhcp"}`, `unknown field "ipam"`},
		{"wrong kind", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"NetworkConfig"}`, `kind "NetworkConfig"`},
		{"bad mode", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mode":"bridge"}`, `mode "bridge"`},
		{"bad address", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.61.300/24"]}`, `addresses[0] "10.0.61.300/24"`},
		{"no prefix length", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.61.3"]}`, `addresses[0]`},
		{"loopback", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["127.0.0.2/8"]}`, `not a unicast address`},
		{"duplicate", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","addresses":["10.0.0.2/24","10.0.0.2/16"]}`, `the same address as addresses[0]`},
		{"long name", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"a-very-long-name0"}`, `IFNAMSIZ`},
		{"name template", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"net%d"}`, `interfaceName "net%d"`},
		{"carriage return", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"net\r1"}`, `white space`},
		{"vertical tab", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"net\u000b1"}`, `white space`},
		{"the pod's own eth0", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"eth0"}`, `the pod's network`},
		{"a travel name", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","interfaceName":"rdmamv0a0b0c0d"}`, `rdmamv`},
		{"mtu", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","mtu":20}`, `mtu 20`},
		{"route family", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","routes":[{"destination":"10.0.0.0/8","gateway":"fd00::1"}]}`, `routes[0]: gateway fd00::1`},
		{"nccl plugins none", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","ncclPlugins":"none"}`, ""},
		{"nccl plugins auto", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","ncclPlugins":"auto"}`, ""},
		{"nccl plugins off", `{"apiVersion":"rdma.example.com/v1alpha1","kind":"PodNetworkConfig","ncclPlugins":"off"}`, `ncclPlugins "off": want auto or none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.raw))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Decode: error %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}

func TestMergeClaimOverridesClass(t *testing.T) {
	class := PodNetworkConfig{Mode: ModeSubInterface, MTU: 1500, InterfaceName: "net1", NCCLPlugins: NCCLPluginsNone}
	claim := PodNetworkConfig{MTU: 4200, Addresses: []string{"10.0.61.9/24"}}
	got := Merge(class, claim)
	if got.Mode != ModeSubInterface || got.MTU != 4200 || got.InterfaceName != "net1" || len(got.Addresses) != 1 || got.NCCLPlugins != NCCLPluginsNone {
		t.Fatalf("Merge = %+v", got)
	}
	if got := Merge(class, PodNetworkConfig{NCCLPlugins: NCCLPluginsAuto}); got.NCCLPlugins != NCCLPluginsAuto {
		t.Fatalf("the claim's ncclPlugins auto does not replace the class's none: %+v", got)
	}
}

// One config may not ask for more addresses or routes than the bounds
// (round 3, M2: one claim could exhaust the node's range and the HCA's
// GID table).
func TestValidateBoundsAddressesAndRoutes(t *testing.T) {
	var c PodNetworkConfig
	for i := range MaxAddresses + 1 {
		c.Addresses = append(c.Addresses, fmt.Sprintf("10.0.63.%d/24", 10+i))
	}
	for i := range MaxRoutes + 1 {
		c.Routes = append(c.Routes, Route{Destination: fmt.Sprintf("10.9.%d.0/24", i)})
	}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("addresses: %d, at most %d", MaxAddresses+1, MaxAddresses)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("routes: %d, at most %d", MaxRoutes+1, MaxRoutes)) {
		t.Fatalf("Validate of %d addresses and %d routes: %v", len(c.Addresses), len(c.Routes), err)
	}
	c.Addresses, c.Routes = c.Addresses[:MaxAddresses], c.Routes[:MaxRoutes]
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate at the bounds: %v", err)
	}
}
