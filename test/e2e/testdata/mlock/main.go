// Command mlock pins 64 MiB with mlock(2), as an RDMA registration pins its
// buffers, and says whether it could. It needs RLIMIT_MEMLOCK >= 64 MiB or
// CAP_IPC_LOCK. Built static (CGO_ENABLED=0) to run in any image.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const size = 64 << 20

func main() {
	buf := make([]byte, size)
	if err := unix.Mlock(buf); err != nil {
		fmt.Printf("mlock %d MiB failed: %v\n", size>>20, err)
		os.Exit(1)
	}
	fmt.Printf("mlock %d MiB ok\n", size>>20)
	_ = unix.Munlock(buf)
}
