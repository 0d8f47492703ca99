package metrics

import (
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/portstats"
	"github.com/rdma-cdi/rdma-cdi/pkg/sysfs"
)

// portCounter is a file of ports/N/counters or hw_counters as a counter.
type portCounter struct {
	file  string
	hw    bool // in hw_counters
	scale float64
	desc  *prometheus.Desc
}

var portLabels = []string{"device", "port"}

func portDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(portLabels[:len(portLabels):len(portLabels)], extra...), nil)
}

// portCounters are the traffic and error counters exported per port. The
// data counters count 4-octet words (the IBTA PMA's unit, as the kernel
// documents), hence the scale to bytes.
var portCounters = []portCounter{
	{file: "port_xmit_data", scale: 4, desc: portDesc("rdma_port_data_transmitted_bytes_total", "Data transmitted by the port (counters/port_xmit_data × 4).")},
	{file: "port_rcv_data", scale: 4, desc: portDesc("rdma_port_data_received_bytes_total", "Data received by the port (counters/port_rcv_data × 4).")},
	{file: "port_xmit_packets", scale: 1, desc: portDesc("rdma_port_packets_transmitted_total", "Packets transmitted by the port (counters/port_xmit_packets).")},
	{file: "port_rcv_packets", scale: 1, desc: portDesc("rdma_port_packets_received_total", "Packets received by the port (counters/port_rcv_packets).")},
	{file: "symbol_error", scale: 1, desc: portDesc("rdma_port_symbol_errors_total", "Minor link errors on the port's physical lanes (counters/symbol_error).")},
	{file: "port_rcv_errors", scale: 1, desc: portDesc("rdma_port_receive_errors_total", "Packets with errors received by the port (counters/port_rcv_errors).")},
	{file: "link_downed", scale: 1, desc: portDesc("rdma_port_link_downed_total", "Times the link went down after error recovery failed (counters/link_downed).")},
	{file: "port_xmit_discards", scale: 1, desc: portDesc("rdma_port_transmit_discards_total", "Outbound packets discarded by the port (counters/port_xmit_discards).")},
	{file: "np_cnp_sent", hw: true, scale: 1, desc: portDesc("rdma_port_cnp_sent_total", "RoCE congestion notification packets sent by this port as notification point (hw_counters/np_cnp_sent).")},
	{file: "np_ecn_marked_roce_packets", hw: true, scale: 1, desc: portDesc("rdma_port_ecn_marked_packets_total", "ECN-marked RoCE packets received (hw_counters/np_ecn_marked_roce_packets).")},
	{file: "rp_cnp_handled", hw: true, scale: 1, desc: portDesc("rdma_port_cnp_handled_total", "Congestion notification packets handled by this port as reaction point (hw_counters/rp_cnp_handled).")},
	{file: "out_of_buffer", hw: true, scale: 1, desc: portDesc("rdma_port_out_of_buffer_total", "Packets dropped for lack of a receive WQE (hw_counters/out_of_buffer).")},
}

var (
	portInfoDesc      = portDesc("rdma_port_info", "An RDMA port: its link layer and netdev.", "link_layer", "netdev")
	portStateDesc     = portDesc("rdma_port_state_id", "The port's logical state as sysfs numbers it: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.")
	portPhysStateDesc = portDesc("rdma_port_physical_state_id", "The port's physical state as sysfs numbers it: 2 Polling, 3 Disabled, 5 LinkUp, ...")
	portRateDesc      = portDesc("rdma_port_rate_bytes_per_second", "The port's signaling rate.")
	portGIDsDesc      = portDesc("rdma_port_gids", "Used entries of the port's GID table.")
	portNCCLGIDDesc   = portDesc("rdma_port_nccl_gid_index", "The GID index NCCL picks on this RoCE port, by NCCL's own rule and this node's NCCL settings.")
)

// portCollector reads each port's live values at scrape time. Which ports
// there are, their GIDs and NCCL's index come from the latest generation
// (the watch keeps it current within its debounce): reading every GID
// table again at each scrape would cost a 256-HCA node 65,000 reads.
type portCollector struct {
	latest func() (snapshot, bool)

	mu         sync.Mutex // reader is not safe for concurrent scrapes
	reader     portstats.Reader
	readErrors uint64 // exported after the ports, so a scrape counts its own
}

var portReadErrorsDesc = prometheus.NewDesc("rdma_cdi_port_read_errors_total", "Ports whose live values could not be read at a scrape.", nil, nil)

func newPortCollector(root sysfs.Root, latest func() (snapshot, bool)) *portCollector {
	c := &portCollector{latest: latest, reader: portstats.Reader{Root: root}}
	for _, pc := range portCounters {
		if pc.hw {
			c.reader.HWCounters = append(c.reader.HWCounters, pc.file)
		} else {
			c.reader.Counters = append(c.reader.Counters, pc.file)
		}
	}
	return c
}

func (c *portCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{portReadErrorsDesc, portInfoDesc, portStateDesc, portPhysStateDesc, portRateDesc, portGIDsDesc, portNCCLGIDDesc} {
		ch <- d
	}
	for _, pc := range portCounters {
		ch <- pc.desc
	}
}

func (c *portCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if snap, ok := c.latest(); ok {
		rule := nccl.NodeGIDRule(snap.NCCL)
		for _, d := range snap.Node.Devices {
			for _, p := range d.Ports {
				c.collectPort(ch, d, p, rule)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(portReadErrorsDesc, prometheus.CounterValue, float64(c.readErrors))
}

func (c *portCollector) collectPort(ch chan<- prometheus.Metric, d model.Device, p model.Port, rule nccl.GIDRule) {
	// sysfs names are bytes: a netdev renamed to invalid UTF-8 must not
	// fail the ports after it.
	labels := []string{strings.ToValidUTF8(d.Name, "?"), strconv.Itoa(p.Number)}
	gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append(labels, extra...)...)
	}
	gauge(portInfoDesc, 1, string(p.LinkLayer), strings.ToValidUTF8(p.NetDev, "?"))
	gauge(portGIDsDesc, float64(len(p.GIDs)))
	if p.LinkLayer == model.LinkLayerEthernet {
		if idx, ok := nccl.SelectGIDIndex(p, rule); ok {
			gauge(portNCCLGIDDesc, float64(idx))
		}
	}
	s, err := c.reader.Read(d.Name, p.Number)
	if err != nil {
		// A port gone between generations, or a file that does not parse:
		// its live values are left out of this scrape, and counted.
		c.readErrors++
		return
	}
	gauge(portStateDesc, float64(s.StateID))
	gauge(portPhysStateDesc, float64(s.PhysStateID))
	if s.RateGbps > 0 {
		gauge(portRateDesc, s.RateGbps*1e9/8)
	}
	for _, pc := range portCounters {
		values := s.Counters
		if pc.hw {
			values = s.HWCounters
		}
		if v, ok := values[pc.file]; ok {
			ch <- prometheus.MustNewConstMetric(pc.desc, prometheus.CounterValue, float64(v)*pc.scale, labels...)
		}
	}
}
