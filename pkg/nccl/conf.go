package nccl

import (
	"bytes"
	"strings"
)

// The block rdma-cdi writes into an nccl.conf is fenced so that a later run
// (a restarted container) replaces it instead of treating it as the image's.
// The fence lines hold no '=', so every NCCL version skips them.
const (
	confBegin = "# BEGIN rdma-cdi defaults: the process environment overrides these"
	confEnd   = "# END rdma-cdi defaults"
)

// ConfKeys returns the keys an nccl.conf sets, read as NCCL reads it: a key
// is the text before the first '=' of a line, with no trimming; lines
// starting with '#' are comments.
func ConfKeys(data []byte) map[string]bool {
	keys := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if key, _, ok := strings.Cut(line, "="); ok && key != "" {
			keys[key] = true
		}
	}
	return keys
}

// MergeConf returns existing (the image's nccl.conf, possibly with an
// earlier rdma-cdi block) with a fresh rdma-cdi block of the vars that
// neither the image's own lines nor skip (e.g. the container's process env)
// already set. Values holding a newline are dropped: they would inject keys;
// so are names that are empty, hold '=' or a newline, or start with '#'
// ("A=B" would set A).
func MergeConf(existing []byte, vars []Var, skip func(name string) bool) []byte {
	own := stripBlock(existing)
	taken := ConfKeys(own)
	var block bytes.Buffer
	for _, v := range vars {
		if !validConfName(v.Name) || taken[v.Name] || (skip != nil && skip(v.Name)) || strings.ContainsAny(v.Value, "\n\r") {
			continue
		}
		block.WriteString(v.Name + "=" + v.Value + "\n")
	}
	out := bytes.TrimRight(own, "\n")
	if len(out) > 0 {
		out = append(out, '\n')
	}
	if block.Len() == 0 {
		return out
	}
	out = append(out, confBegin+"\n"...)
	out = append(out, block.Bytes()...)
	return append(out, confEnd+"\n"...)
}

// stripBlock removes complete rdma-cdi blocks (a BEGIN fence and the next
// END fence, and what lies between) and stray fences. The lines after a
// BEGIN that no END follows are the image's (say, an edited file): they
// stay, only the fence line goes.
func stripBlock(data []byte) []byte {
	var out bytes.Buffer
	lines := strings.SplitAfter(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		switch strings.TrimRight(lines[i], "\n") {
		case confBegin:
			for j := i + 1; j < len(lines); j++ {
				if strings.TrimRight(lines[j], "\n") == confEnd {
					i = j
					break
				}
			}
			continue
		case confEnd:
			continue
		}
		out.WriteString(lines[i])
	}
	return out.Bytes()
}

// validConfName reports whether name can be written as one nccl.conf key.
func validConfName(name string) bool {
	return name != "" && !strings.HasPrefix(name, "#") && !strings.ContainsAny(name, "=\n\r")
}
