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
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	return statefile.Save(filepath.Join(dir, File), 0o644, version, index{Sandboxes: ids})
}

// ErrNoIndex is Read's and Contains' error when there is no index in dir:
// no agent with pod networking on has written it since the node booted
// (the state directory is a tmpfs) or since pod networking was turned on.
var ErrNoIndex = errors.New("no pod sandbox index")

// Read returns the sandboxes the index in dir lists. The hook only reads:
// a bad file is an error naming it, left for the agent's next write.
// Non-blocking and regular files only (statefile.Read): a FIFO put there
// would otherwise hold every container start the hook makes.
func Read(dir string) ([]string, error) {
	path := filepath.Join(dir, File)
	var ix index
	err := statefile.Load(path, maxSize, statefile.Decoders{
		version: func(b []byte) error { return json.Unmarshal(b, &ix) },
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoIndex)
	}
	if err != nil {
		return nil, err
	}
	return ix.Sandboxes, nil
}

// Contains reports whether the index in dir lists sandbox id (Read).
func Contains(dir, id string) (bool, error) {
	ids, err := Read(dir)
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, id), nil
}

// Remove deletes the index in dir, if any: pod networking is off there
// now. The hook reads pod_network.enabled, not the index, to know whether
// to check at all; a list left behind would only mislead a person, and a
// later turn back on must start from the agent's own list.
func Remove(dir string) error {
	err := os.Remove(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
