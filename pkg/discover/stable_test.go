package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Regression: a device unplugged or replugged while discovery read it
// failed the whole scan ("open .../ports/1/state: no such file or
// directory"). It is now read whole or skipped with a warning.
func TestDeviceReplacedDuringScan(t *testing.T) {
	root := miniTree(t)
	target, err := filepath.EvalSymlinks(filepath.Join(root, "class/infiniband/mlx5_1"))
	must(t, err)
	// Replugs make new directories: rotate among copies (slot 0 free).
	const slots = 64
	for i := 1; i < slots; i++ {
		must(t, copyDir(target, fmt.Sprintf("%s.%d", target, i)))
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			_ = os.Rename(target, fmt.Sprintf("%s.%d", target, i%slots))
			time.Sleep(200 * time.Microsecond)
			_ = os.Rename(fmt.Sprintf("%s.%d", target, (i+1)%slots), target)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := 0; i < 300; i++ {
		res, err := discoverTree(root)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		switch len(res.Node.Devices) {
		case 0:
			if !strings.Contains(strings.Join(res.Warnings, "\n"), "mlx5_1 vanished") {
				t.Fatalf("run %d: skipped without a warning: %v", i, res.Warnings)
			}
		case 1:
			if p := res.Node.Devices[0].Ports; len(p) != 1 || len(p[0].GIDs) != 2 || p[0].State != "ACTIVE" {
				t.Fatalf("run %d: torn device read: %+v", i, p)
			}
		}
	}
}

func copyDir(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case fi.IsDir():
			return os.MkdirAll(to, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
}
