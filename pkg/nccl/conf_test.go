package nccl

import (
	"strings"
	"testing"
)

// Regression (found by FuzzMergeConf): a BEGIN fence without an END (an
// edited file) made every image line after it count as rdma-cdi's own, so
// the image's keys were dropped and overwritten.
func TestMergeConfUnterminatedFenceKeepsImageKeys(t *testing.T) {
	existing := confBegin + "\nNCCL_IB_TIMEOUT=9\nNCCL_DEBUG=INFO\n"
	got := string(MergeConf([]byte(existing), []Var{{"NCCL_IB_TIMEOUT", "22"}, {"NCCL_IB_HCA", "mlx5_1:1"}}, nil))
	want := "NCCL_IB_TIMEOUT=9\nNCCL_DEBUG=INFO\n" + confBegin + "\nNCCL_IB_HCA=mlx5_1:1\n" + confEnd + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if again := string(MergeConf([]byte(got), []Var{{"NCCL_IB_TIMEOUT", "22"}, {"NCCL_IB_HCA", "mlx5_1:1"}}, nil)); again != got {
		t.Fatalf("second merge changed it:\n%s", again)
	}
}

// Regression (found by FuzzMergeConf): a var name holding '=' wrote a line
// that sets another key ("A=B" + "c" sets A to "B=c").
func TestMergeConfRefusesNamesThatInjectKeys(t *testing.T) {
	got := string(MergeConf([]byte("X=1\n"), []Var{{"NCCL_IB_HCA=evil", "1"}, {"", "v"}, {"#C", "x"}, {"NCCL_IB_HCA", "mlx5_1:1"}}, nil))
	if strings.Contains(got, "evil") || strings.Contains(got, "\n=v") || strings.Contains(got, "#C") {
		t.Fatalf("bad names written:\n%s", got)
	}
	if keys := ConfKeys([]byte(got)); len(keys) != 2 || !keys["X"] || !keys["NCCL_IB_HCA"] {
		t.Fatalf("keys %v in\n%s", keys, got)
	}
}
