package cdispec

import (
	"fmt"
	"testing"
)

// BenchmarkRender renders the full spec (libraries and every hook) for a
// typical 9-HCA node and for a large 64-VF node with 256 GIDs per port.
func BenchmarkRender(b *testing.B) {
	for _, size := range []struct{ devices, gids int }{{9, 16}, {64, 256}} {
		b.Run(fmt.Sprintf("%ddev_x_%dgid", size.devices, size.gids), func(b *testing.B) {
			node, stack, opts := bigNode(size.devices, size.gids), testStack(), fullOptions()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Render(node, stack, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderMarshal adds the YAML encoding, the rest of what a
// regeneration costs before the file comparison.
func BenchmarkRenderMarshal(b *testing.B) {
	node, stack, opts := bigNode(64, 256), testStack(), fullOptions()
	b.ReportAllocs()
	for b.Loop() {
		spec, _, err := Render(node, stack, opts)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Marshal(spec, "yaml"); err != nil {
			b.Fatal(err)
		}
	}
}
