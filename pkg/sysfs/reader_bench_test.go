package sysfs

import (
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkReadGIDSlot reads one empty GID slot the three ways discovery
// could: ReadAttr (os.Open, io.ReadAll), Reader (open, one read, close) and
// Dir (openat relative to the port directory).
func BenchmarkReadGIDSlot(b *testing.B) {
	dir := b.TempDir()
	port := filepath.Join(dir, "class/infiniband/mlx5_0/ports/1")
	const slots = 64
	for i := range slots {
		writeAttrB(b, filepath.Join(port, "gids", strconv.Itoa(i)), "0000:0000:0000:0000:0000:0000:0000:0000\n")
	}
	names := make([]string, slots)
	for i := range names {
		names[i] = "gids/" + strconv.Itoa(i)
	}
	b.Run("ReadAttr", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := readAttr(port + "/" + names[i%slots]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Reader", func(b *testing.B) {
		r := NewReader()
		i := 0
		for b.Loop() {
			if _, err := r.ReadBytes(port + "/" + names[i%slots]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Dir", func(b *testing.B) {
		d, err := NewReader().OpenDir(port)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		i := 0
		for b.Loop() {
			if _, err := d.ReadBytes(names[i%slots]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func writeAttrB(b *testing.B, p, body string) {
	b.Helper()
	if err := mkdirWrite(p, body); err != nil {
		b.Fatal(err)
	}
}
