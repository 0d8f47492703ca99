package model

import (
	"slices"
	"testing"
)

func TestSortNames(t *testing.T) {
	in := []string{"mlx5_bond_0", "mlx5_10", "mlx5_2", "mlx5_1", "irdma0", "mlx5_02", "mlx5_99999999999999999999999"}
	SortNames(in)
	want := []string{"irdma0", "mlx5_1", "mlx5_2", "mlx5_02", "mlx5_10", "mlx5_99999999999999999999999", "mlx5_bond_0"}
	if !slices.Equal(in, want) {
		t.Errorf("sorted = %v, want %v", in, want)
	}
}
