package nodecmd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
)

// AgentBinary is the binary of the long-running agents (watch,
// device-plugin) and of top. They link gRPC, Prometheus' client and
// net/http, which would double this binary's dependencies and lengthen
// every start of list, generate or the runtime wrapper, so they live
// there and `rdma-cdi watch` hands over to it.
const AgentBinary = "rdma-cdi-agent"

// AgentCommands are rdma-cdi's stand-ins for the agent binary's commands:
// each replaces this process with `rdma-cdi-agent` and the same arguments.
func AgentCommands() []cli.Command {
	forward := func(use, short string) cli.Command {
		return func(*cli.App) *cobra.Command {
			return &cobra.Command{
				Use:   use,
				Short: short + " (runs " + AgentBinary + " " + use + ")",
				// The agent parses the flags and reads the config: its
				// flags are not all this binary's.
				DisableFlagParsing: true,
				PersistentPreRunE:  func(*cobra.Command, []string) error { return nil },
				RunE: func(*cobra.Command, []string) error {
					return execAgent(os.Args[1:])
				},
			}
		}
	}
	return []cli.Command{
		forward("watch", cli.WatchShort),
		forward("device-plugin", cli.DevicePluginShort),
		forward("top", cli.TopShort),
	}
}

// execAgent replaces this process with the agent binary found beside this
// executable (how every install lays them out), else in PATH.
func execAgent(args []string) error {
	path, err := agentPath()
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{AgentBinary}, args...), os.Environ())
	return fmt.Errorf("exec %s: %w", path, err)
}

func agentPath() (string, error) {
	self, err := os.Executable()
	if err == nil {
		beside := filepath.Join(filepath.Dir(self), AgentBinary)
		if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return beside, nil
		}
	}
	path, err := exec.LookPath(AgentBinary)
	if err != nil {
		return "", fmt.Errorf("%s is not installed beside this binary or in PATH (make build builds it; the packages and install.sh install it): %w", AgentBinary, err)
	}
	// Another install's, maybe of another version: say which.
	fmt.Fprintf(os.Stderr, "rdma-cdi: no %s beside %s; running %s from PATH\n", AgentBinary, self, path)
	return path, nil
}
