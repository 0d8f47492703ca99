package model

import "testing"

func TestTransport(t *testing.T) {
	port := func(ll LinkLayer) []Port { return []Port{{Number: 1, LinkLayer: ll}} }
	for _, tc := range []struct {
		name string
		dev  Device
		want Transport
	}{
		{"mlx5 RoCE", Device{PCIVendor: "0x15b3", PCIDevice: "0x101b", Ports: port(LinkLayerEthernet)}, TransportRoCE},
		{"mlx5 IB", Device{PCIVendor: "0x15b3", PCIDevice: "0x101b", Ports: port(LinkLayerInfiniBand)}, TransportInfiniBand},
		{"EFA p4d", Device{PCIVendor: "0x1d0f", PCIDevice: "0xefa0", Ports: port(LinkLayerUnspecified)}, TransportEFA},
		{"EFA p5", Device{PCIVendor: "0x1d0f", PCIDevice: "0xefa1", Ports: port(LinkLayerUnspecified)}, TransportEFA},
		{"EFA 3", Device{PCIVendor: "0x1D0F", PCIDevice: "0xEFA2", Ports: port(LinkLayerUnspecified)}, TransportEFA},
		{"EFA, PCI not read", Device{Driver: "efa", Ports: port(LinkLayerUnspecified)}, TransportEFA},
		{"ENA is no EFA", Device{PCIVendor: "0x1d0f", PCIDevice: "0xec20", Ports: port(LinkLayerUnspecified)}, TransportUnspecified},
		{"unknown link layer", Device{PCIVendor: "0x1234", PCIDevice: "0x0001", Ports: port(LinkLayerUnspecified)}, TransportUnspecified},
		{"no port", Device{PCIVendor: "0x15b3"}, TransportUnspecified},
	} {
		if got := tc.dev.Transport(); got != tc.want {
			t.Errorf("%s: Transport() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
