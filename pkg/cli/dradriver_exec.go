//go:build !dra && !hookonly

package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// draBinary is rdma-cdi built with the DRA driver (-tags dra).
const draBinary = "rdma-cdi-dra"

// newDRADriverCommand hands `rdma-cdi dra-driver ...` to rdma-cdi-dra,
// beside this executable or on PATH: the Kubernetes client it links would
// slow every hook process of this binary (BENCHMARKS.md).
func newDRADriverCommand(*App) *cobra.Command {
	return &cobra.Command{
		Use:                "dra-driver",
		Short:              "Serve RDMA HCAs as Kubernetes DRA devices, and keep the CDI spec current (runs " + draBinary + ")",
		DisableFlagParsing: true,
		// rdma-cdi-dra reads the flags and the config itself.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(*cobra.Command, []string) error {
			path, err := findDRABinary()
			if err != nil {
				return err
			}
			return syscall.Exec(path, append([]string{draBinary}, os.Args[1:]...), os.Environ())
		},
	}
}

func findDRABinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), draBinary)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	path, err := exec.LookPath(draBinary)
	if err != nil {
		return "", fmt.Errorf("dra-driver needs %s beside rdma-cdi or on PATH (make build; the DaemonSet image has it): %w", draBinary, err)
	}
	return path, nil
}
