// Command mksynth builds a synthetic RDMA node (fixture.Synthetic) for the
// scaling benchmarks: DIR/sys and DIR/dev, placeholder device nodes unless
// -mknod.
//
//	mksynth -devices 64 -gids 256 -out DIR [-mknod]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rdma-cdi/rdma-cdi/test/fixture"
)

func main() {
	devices := flag.Int("devices", 8, "RDMA devices (one port each)")
	gids := flag.Int("gids", 4, "GID table slots per port (all filled)")
	out := flag.String("out", "", "output directory (gets sys/ and dev/)")
	mknod := flag.Bool("mknod", false, "real char device nodes (needs root)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "mksynth: -out is required")
		os.Exit(2)
	}
	t := fixture.Synthetic(*devices, *gids)
	if err := fixture.BuildSysfs(t, filepath.Join(*out, "sys")); err != nil {
		fmt.Fprintln(os.Stderr, "mksynth:", err)
		os.Exit(1)
	}
	if err := fixture.BuildDev(t, filepath.Join(*out, "dev"), *mknod); err != nil {
		fmt.Fprintln(os.Stderr, "mksynth:", err)
		os.Exit(1)
	}
}
