package nodecmd

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
)

// Man is `rdma-cdi man DIR`, hidden: it writes a man page (section 1) for
// the binary and each of its commands into DIR. The packages and
// install.sh run it, so the pages always match the binary they ship with.
func Man(app *cli.App) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write rdma-cdi's man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			header := &doc.GenManHeader{
				Title:   strings.ToUpper(root.Name()),
				Section: "1",
				Source:  root.Name() + " " + app.Version,
				Manual:  "rdma-cdi manual",
			}
			root.DisableAutoGenTag = true // no generation date: the same binary writes the same pages
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("man pages in %s: %w", args[0], err)
			}
			return nil
		},
	}
}
