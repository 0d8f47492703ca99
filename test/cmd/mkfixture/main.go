// Command mkfixture builds RDMA fixtures from topology files:
//
//	mkfixture build -topology test/fixtures/seed002.toml -out DIR [-mknod]
//	    writes DIR/sys (a sysfs tree), DIR/dev (DIR/dev/infiniband nodes) and
//	    DIR/proc (the kernel's release and config, the NVIDIA module's version)
//	mkfixture net -topology FILE
//	    creates the netdevs in the current network namespace; works
//	    unprivileged inside `unshare --user --map-root-user --net`
//	mkfixture list
//	    prints the bundled topology names
//
// -topology takes a file path or the name of a bundled topology (seed002).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

const usage = `usage:
  mkfixture build -topology FILE|NAME -out DIR [-mknod]
  mkfixture net -topology FILE|NAME
  mkfixture list
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mkfixture:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(strings.TrimRight(usage, "\n"))
	}
	switch args[0] {
	case "build":
		return build(args[1:])
	case "net":
		return setupNet(args[1:])
	case "list":
		for _, name := range fixture.Bundled() {
			fmt.Fprintln(stdout, name)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	topo := fs.String("topology", "", "topology file or bundled name")
	out := fs.String("out", "", "output directory (gets sys/, dev/, proc/ and host/)")
	mknod := fs.Bool("mknod", false, "make real char device nodes (needs root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("build: -out is required")
	}
	t, err := loadTopology(*topo)
	if err != nil {
		return err
	}
	if err := fixture.BuildSysfs(t, filepath.Join(*out, "sys")); err != nil {
		return err
	}
	if err := fixture.BuildProc(t, filepath.Join(*out, "proc")); err != nil {
		return err
	}
	if err := fixture.BuildHost(t, filepath.Join(*out, "host")); err != nil {
		return err
	}
	return fixture.BuildDev(t, filepath.Join(*out, "dev"), *mknod)
}

func setupNet(args []string) error {
	fs := flag.NewFlagSet("net", flag.ContinueOnError)
	topo := fs.String("topology", "", "topology file or bundled name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t, err := loadTopology(*topo)
	if err != nil {
		return err
	}
	h, err := netlink.NewHandle() // the current network namespace
	if err != nil {
		return err
	}
	defer h.Close()
	return fixture.SetupNetNS(t, h)
}

// loadTopology takes a path, or a bundled name when no such file exists.
func loadTopology(arg string) (fixture.Topology, error) {
	if arg == "" {
		return fixture.Topology{}, errors.New("-topology is required")
	}
	if _, err := os.Stat(arg); err == nil {
		return fixture.Load(arg)
	}
	return fixture.LoadBundled(arg)
}
