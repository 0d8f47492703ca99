package sysfs

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

func TestParseACS(t *testing.T) {
	ctrl := model.ACSSourceValidation | model.ACSRequestRedirect | model.ACSCompletionRedirect | model.ACSUpstreamForwarding
	withACS := ConfigSpace(0x10b5, 0xc010, 0x060400, &ctrl)

	// A list of three: AER at 0x100, ACS at 0x148, then a vendor-specific one.
	chained := ConfigSpace(0x8086, 0x347a, 0x060400, nil)
	binary.LittleEndian.PutUint32(chained[0x100:], 0x0001|1<<16|0x148<<20)
	binary.LittleEndian.PutUint32(chained[0x148:], ExtCapACS|1<<16|0x220<<20)
	binary.LittleEndian.PutUint16(chained[0x14c:], 0x007f)
	binary.LittleEndian.PutUint16(chained[0x14e:], model.ACSSourceValidation)
	binary.LittleEndian.PutUint32(chained[0x220:], 0x000b|1<<16)

	loop := ConfigSpace(0x8086, 0x347a, 0x060400, nil)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|0x100<<20)

	outside := ConfigSpace(0x8086, 0x347a, 0x060400, nil)
	binary.LittleEndian.PutUint32(outside[0x100:], 0x0001|0x300<<20)
	outside = outside[:0x200] // the next one, at 0x300, is cut off

	gone := make([]byte, 4096)
	for i := range gone {
		gone[i] = 0xff
	}
	for _, tc := range []struct {
		name      string
		config    []byte
		want      model.ACS
		errPrefix string
	}{
		{name: "acs first", config: withACS, want: model.ACS{Readable: true, Present: true, Capability: 0x5f, Control: ctrl}},
		{name: "acs in a chain", config: chained, want: model.ACS{Readable: true, Present: true, Capability: 0x7f, Control: model.ACSSourceValidation}},
		{name: "no extended capability", config: ConfigSpace(0x10de, 0x2330, 0x030200, nil), want: model.ACS{Readable: true}},
		{name: "unprivileged read: 64 bytes", config: withACS[:64], want: model.ACS{}, errPrefix: "config space holds 64 bytes"},
		{name: "list loops", config: loop, want: model.ACS{Readable: true}, errPrefix: "extended capability list loops"},
		{name: "offset outside", config: outside, want: model.ACS{Readable: true}, errPrefix: "extended capability at 0x300"},
		{name: "function gone: all ones", config: gone, want: model.ACS{Readable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseACS(tc.config)
			err := got.Err
			got.Err = ""
			if got != tc.want {
				t.Errorf("ParseACS = %+v, want %+v", got, tc.want)
			}
			if tc.errPrefix == "" && err != "" || !strings.HasPrefix(err, tc.errPrefix) {
				t.Errorf("Err = %q, want prefix %q", err, tc.errPrefix)
			}
		})
	}
	if got := ParseACS(withACS); !got.Redirects() || got.Enabled() != "SrcValid ReqRedir CmpltRedir UpstreamFwd" {
		t.Errorf("Redirects %v, Enabled %q", got.Redirects(), got.Enabled())
	}
	if got := ParseACS(chained); got.Redirects() || got.Enabled() != "SrcValid" {
		t.Errorf("source validation alone: Redirects %v, Enabled %q", got.Redirects(), got.Enabled())
	}
}

func FuzzParseACS(f *testing.F) {
	ctrl := model.ACSRequestRedirect
	f.Add(ConfigSpace(0x10b5, 0xc010, 0x060400, &ctrl))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseACS(b) // must not panic
	})
}
