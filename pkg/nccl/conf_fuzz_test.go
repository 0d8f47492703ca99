package nccl

import (
	"bytes"
	"strings"
	"testing"
)

// imageLines are the lines of an nccl.conf that belong to the image: all
// but those of complete rdma-cdi blocks (a BEGIN fence with an END fence
// after it). A fence without its partner is only a comment.
func imageLines(data []byte) []string {
	lines := strings.Split(string(data), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if lines[i] == confBegin {
			end := -1
			for j := i + 1; j < len(lines); j++ {
				if lines[j] == confEnd {
					end = j
					break
				}
			}
			if end >= 0 {
				i = end
				continue
			}
		}
		out = append(out, lines[i])
	}
	return out
}

// firstValues maps each key to the value of its first line: NCCL sets
// each variable without overwriting, so the first line of a key wins.
func firstValues(lines []string) map[string]string {
	vals := map[string]string{}
	for _, line := range lines {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			if _, seen := vals[k]; !seen {
				vals[k] = v
			}
		}
	}
	return vals
}

func FuzzMergeConf(f *testing.F) {
	f.Add([]byte(""), "NCCL_IB_GID_INDEX", "3", "NCCL_IB_TIMEOUT", "22", uint8(0))
	f.Add([]byte("NCCL_IB_HCA=mlx5_9\n"), "NCCL_IB_GID_INDEX", "3", "NCCL_IB_HCA", "x", uint8(1))
	f.Add([]byte("A=1\n"+confBegin+"\nNCCL_IB_HCA=old\n"+confEnd+"\nB=2"), "NCCL_SOCKET_IFNAME", "eth1", "B", "3", uint8(2))
	f.Add([]byte(confBegin+"\nNCCL_IB_TIMEOUT=9\n"), "NCCL_IB_TIMEOUT", "22", "NCCL_X", "y", uint8(0))
	f.Add([]byte("#NCCL_IB_HCA=x\n=v\nNCCL_DEBUG=INFO\r\n"), "NCCL_DEBUG", "WARN", "NCCL_IB_HCA", "a\nNCCL_DEBUG=TRACE", uint8(0))
	f.Add([]byte(confEnd+"\nA=1\n"), "A=B", "c", "", "v", uint8(0))
	f.Fuzz(func(t *testing.T, existing []byte, n1, v1, n2, v2 string, skipMask uint8) {
		vars := []Var{{"NCCL_IB_HCA", "mlx5_1:1"}, {n1, v1}, {n2, v2}}
		skip := func(name string) bool {
			for i, v := range vars {
				if v.Name == name && skipMask&(1<<i) != 0 {
					return true
				}
			}
			return false
		}
		merged := MergeConf(existing, vars, skip)

		img := imageLines(existing)
		imgKeys := firstValues(img)
		got := firstValues(strings.Split(string(merged), "\n"))
		// 1. The image's own keys keep their values.
		for k, v := range imgKeys {
			if got[k] != v {
				t.Fatalf("image key %q: %q -> %q\nexisting %q\nmerged %q", k, v, got[k], existing, merged)
			}
		}
		// 2. No key appears that neither the image nor a var sets, and a
		// skipped var is never written.
		allowed := map[string]bool{}
		for k := range imgKeys {
			allowed[k] = true
		}
		for _, v := range vars {
			if !skip(v.Name) {
				allowed[v.Name] = true
			}
		}
		for k := range ConfKeys(merged) {
			if !allowed[k] {
				t.Fatalf("key %q injected\nexisting %q\nvars %q\nmerged %q", k, existing, vars, merged)
			}
		}
		// 3. Every rdma-cdi line is one var, written whole.
		block := strings.TrimPrefix(string(merged), strings.Join(imageLines(merged), "\n"))
		for _, line := range strings.Split(block, "\n") {
			if line == "" || line == confBegin || line == confEnd {
				continue
			}
			found := false
			for _, v := range vars {
				found = found || line == v.Name+"="+v.Value
			}
			if !found {
				t.Fatalf("block line %q is no var\nmerged %q", line, merged)
			}
		}
		// 4. Idempotent: a second run (a restarted container) changes nothing.
		if again := MergeConf(merged, vars, skip); !bytes.Equal(again, merged) {
			t.Fatalf("not idempotent\nexisting %q\nfirst  %q\nsecond %q", existing, merged, again)
		}
	})
}
