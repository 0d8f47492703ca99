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
// already set. Values holding a newline are dropped: they would inject keys.
func MergeConf(existing []byte, vars []Var, skip func(name string) bool) []byte {
	own := stripBlock(existing)
	taken := ConfKeys(own)
	var block bytes.Buffer
	for _, v := range vars {
		if taken[v.Name] || (skip != nil && skip(v.Name)) || strings.ContainsAny(v.Name+v.Value, "\n\r") {
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

func stripBlock(data []byte) []byte {
	var out bytes.Buffer
	inBlock := false
	for _, line := range strings.SplitAfter(string(data), "\n") {
		switch strings.TrimRight(line, "\n") {
		case confBegin:
			inBlock = true
			continue
		case confEnd:
			inBlock = false
			continue
		}
		if !inBlock {
			out.WriteString(line)
		}
	}
	return out.Bytes()
}
