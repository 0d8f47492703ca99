// Package sandboxlist is the list of pod sandboxes the pod-network agent
// has handled, kept in a file of the node's state directory: the agent
// (pkg/podnetwork/networker) writes it, the container hook reads it. A container of
// a pod in its own network namespace that holds an HCA starts only once
// its sandbox is on the list: a sandbox the runtime started while the
// agent's NRI plugin was away got no interface, and its containers must
// wait (the kubelet retries them) until the agent, back, has given it one.
package sandboxlist

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/rdma-cdi/rdma-cdi/pkg/statefile"
)

// File is the index's name in the state directory (pod_network.state_dir).
const File = "pod-sandboxes.json"

// version changes when the file's meaning does.
const version = 1

// maxSize bounds what a reader takes: ids are 64 hex digits, and a node
// runs a few hundred pods.
const maxSize = 4 << 20

// index is the file's schema (version 1) beside its version.
type index struct {
	Sandboxes []string `json:"sandboxes"`
}

// Write replaces the index in dir with ids, atomically: a reader sees the
// old list or the new one. The list is whole each time, so a bad file
// left by anything else is simply replaced.
func Write(dir string, ids []string) error {
	ids = slices.Sorted(slices.Values(ids))
	return statefile.Save(filepath.Join(dir, File), 0o644, version, index{Sandboxes: ids})
}

// ErrNoIndex is Contains' error when the agent has written no index in dir:
// it has never run there with pod networking on.
var ErrNoIndex = errors.New("no pod sandbox index")

// Contains reports whether the index in dir lists sandbox id. The hook
// only reads: a bad file is an error naming it, left for the agent's next
// write. Non-blocking and regular files only (statefile.Read): a FIFO put
// there would otherwise hold every container start the hook makes.
func Contains(dir, id string) (bool, error) {
	path := filepath.Join(dir, File)
	var ix index
	err := statefile.Load(path, maxSize, statefile.Decoders{
		version: func(b []byte) error { return json.Unmarshal(b, &ix) },
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%s: %w", path, ErrNoIndex)
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(ix.Sandboxes, id), nil
}

// Remove deletes the index in dir, if any: pod networking is off there now,
// and no hook must wait for an agent that will not look at its pod.
func Remove(dir string) error {
	err := os.Remove(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
