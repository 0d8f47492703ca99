package top

import (
	"strings"
	"testing"
	"time"

	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
)

func parse(t *testing.T, text string) []metrics.Sample {
	t.Helper()
	s, err := metrics.ParseScrape(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const before = `rdma_port_state_id{device="mlx5_10",port="1"} 4
rdma_port_state_id{device="mlx5_2",port="1"} 4
rdma_port_state_id{device="mlx5_2",port="2"} 1
rdma_port_rate_bytes_per_second{device="mlx5_10",port="1"} 5e+10
rdma_port_rate_bytes_per_second{device="mlx5_2",port="1"} 1.25e+10
rdma_port_data_received_bytes_total{device="mlx5_10",port="1"} 1000
rdma_port_data_transmitted_bytes_total{device="mlx5_10",port="1"} 500
rdma_port_data_received_bytes_total{device="mlx5_2",port="1"} 100
rdma_port_data_received_bytes_total{device="mlx5_2",port="2"} 100
rdma_port_data_transmitted_bytes_total{device="mlx5_2",port="1"} 9000
`

const after = `rdma_port_state_id{device="mlx5_10",port="1"} 4
rdma_port_state_id{device="mlx5_2",port="1"} 4
rdma_port_state_id{device="mlx5_2",port="2"} 1
rdma_port_rate_bytes_per_second{device="mlx5_10",port="1"} 5e+10
rdma_port_rate_bytes_per_second{device="mlx5_2",port="1"} 1.25e+10
rdma_port_data_received_bytes_total{device="mlx5_10",port="1"} 4001000
rdma_port_data_transmitted_bytes_total{device="mlx5_10",port="1"} 500
rdma_port_data_received_bytes_total{device="mlx5_2",port="1"} 2100
rdma_port_data_received_bytes_total{device="mlx5_2",port="2"} 100
rdma_port_data_transmitted_bytes_total{device="mlx5_2",port="1"} 10
rdma_cdi_hca_holder_info{container="main",container_id="0123456789abcdef",device="mlx5_10",namespace="ml",pod="trainer",source="hook"} 1
rdma_cdi_hca_holder_info{container="",container_id="",device="mlx5_10",namespace="ml",pod="trainer",source="dra"} 1
rdma_cdi_hca_holder_info{container="",container_id="fedcba9876543210",device="mlx5_2",namespace="",pod="",source="hook"} 1
`

func TestCompute(t *testing.T) {
	hcas := Compute(parse(t, before), parse(t, after), 2*time.Second)
	if len(hcas) != 2 || hcas[0].Device != "mlx5_2" || hcas[1].Device != "mlx5_10" {
		t.Fatalf("rows %+v, want mlx5_2 then mlx5_10", hcas)
	}
	m2, m10 := hcas[0], hcas[1]
	if m10.RxBytesPerSecond != 2e6 || m10.TxBytesPerSecond != 0 || m10.State != "ACTIVE" || m10.RateGbps != 400 {
		t.Errorf("mlx5_10: %+v", m10)
	}
	if got := strings.Join(m10.Holders, ","); got != "ml/trainer,ml/trainer/main" {
		t.Errorf("mlx5_10 holders %q", got)
	}
	// Two ports summed; a counter that went backwards (a reset) is unknown.
	if m2.RxBytesPerSecond != 1000 || m2.TxBytesPerSecond != -1 || m2.State != "1:ACTIVE 2:DOWN" {
		t.Errorf("mlx5_2: %+v", m2)
	}
	if got := strings.Join(m2.Holders, ","); got != "fedcba987654" {
		t.Errorf("mlx5_2 holders %q (a container id, 12 characters)", got)
	}
}

func TestRender(t *testing.T) {
	var b strings.Builder
	if err := Render(&b, "header", Compute(parse(t, before), parse(t, after), 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := `header
HCA      STATE            RATE      RX/s    TX/s  HELD BY
mlx5_2   1:ACTIVE 2:DOWN  100 Gb/s  1.0 kB  ?     fedcba987654
mlx5_10  ACTIVE           400 Gb/s  2.0 MB  0 B   ml/trainer, ml/trainer/main
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
