// Command floor is the lower bound for `rdma-cdi generate`: it reads the
// sysfs files generate needs and nothing more, with raw syscalls, and prints
// nothing. bench/run.sh times generate against it.
//
//	floor SYSFS_ROOT
//
// What it reads: the class/infiniband listing; per device its ports; per
// port state, phys_state, link_layer, rate and every gids/N slot, and for
// the non-empty slots gid_attrs/types/N and gid_attrs/ndevs/N; the
// infiniband_verbs and infiniband_mad class entries (ibdev, dev, and port
// for umad/issm) and misc/rdma_cm/dev.
package main

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
)

var buf [4096]byte

// read returns the attribute at path (nil when it cannot be read).
func read(path string) []byte { return readAt(atFDCWD, path) }

const atFDCWD = -100 // AT_FDCWD: openat relative to the working directory

// readAt reads name relative to the directory dirfd.
func readAt(dirfd int, name string) []byte {
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	n, err := syscall.Read(fd, buf[:])
	_ = syscall.Close(fd)
	if err != nil || n < 0 {
		return nil
	}
	return buf[:n]
}

// list returns the names in dir.
func list(dir string) []string {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return names
}

var zeroGID = []byte("0000:0000:0000:0000:0000:0000:0000:0000")

// emptyGID matches all-zero slots and the bare fe80:: prefix.
func emptyGID(g []byte) bool {
	if len(g) < len(zeroGID) {
		return true
	}
	return bytes.Equal(g[4:39], zeroGID[4:39]) && (bytes.Equal(g[:4], zeroGID[:4]) || bytes.Equal(g[:4], []byte("fe80")))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: floor SYSFS_ROOT")
		os.Exit(2)
	}
	sys := os.Args[1]
	total := 0
	ib := sys + "/class/infiniband/"
	for _, dev := range list(ib) {
		for _, port := range list(ib + dev + "/ports") {
			p := ib + dev + "/ports/" + port
			// GID slots are read relative to the port directory, as
			// generate does: the kernel then walks two path components
			// per file, not the whole path and the class symlink.
			pfd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			for _, a := range []string{"state", "phys_state", "link_layer", "rate"} {
				total += len(readAt(pfd, a))
			}
			for _, idx := range list(p + "/gids") {
				if emptyGID(readAt(pfd, "gids/"+idx)) {
					continue
				}
				total += len(readAt(pfd, "gid_attrs/types/"+idx))
				total += len(readAt(pfd, "gid_attrs/ndevs/"+idx))
			}
			_ = syscall.Close(pfd)
		}
	}
	for _, class := range []string{"infiniband_verbs", "infiniband_mad"} {
		dir := sys + "/class/" + class + "/"
		for _, e := range list(dir) {
			total += len(read(dir + e + "/ibdev"))
			total += len(read(dir + e + "/dev"))
			if class == "infiniband_mad" {
				total += len(read(dir + e + "/port"))
			}
		}
	}
	total += len(read(sys + "/class/misc/rdma_cm/dev"))
	if total == 0 {
		os.Exit(1) // nothing read: a wrong root, not a floor
	}
}
