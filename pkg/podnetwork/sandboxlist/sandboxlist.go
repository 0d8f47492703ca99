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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
)

// File is the index's name in the state directory (pod_network.state_dir).
const File = "pod-sandboxes.json"

// version changes when the file's meaning does.
const version = 1

// maxSize bounds what a reader takes: ids are 64 hex digits, and a node
// runs a few hundred pods.
const maxSize = 4 << 20

type index struct {
	Version   int      `json:"version"`
	Sandboxes []string `json:"sandboxes"`
}

// Write replaces the index in dir with ids, atomically: a reader sees the
// old list or the new one.
func Write(dir string, ids []string) error {
	ids = slices.Sorted(slices.Values(ids))
	b, err := json.Marshal(index{Version: version, Sandboxes: ids})
	if err != nil {
		return err
	}
	return specio.WriteAtomic(filepath.Join(dir, File), b, 0o644)
}

// ErrNoIndex is Contains' error when the agent has written no index in dir:
// it has never run there with pod networking on.
var ErrNoIndex = errors.New("no pod sandbox index")

// Contains reports whether the index in dir lists sandbox id.
func Contains(dir, id string) (bool, error) {
	path := filepath.Join(dir, File)
	// Non-blocking, then a regular file only: a FIFO put there would hold
	// every container start the hook makes.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%s: %w", path, ErrNoIndex)
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	} else if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxSize {
		return false, fmt.Errorf("%s: larger than %d bytes", path, maxSize)
	}
	var ix index
	if err := json.Unmarshal(b, &ix); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if ix.Version != version {
		return false, fmt.Errorf("%s: version %d, this hook reads %d", path, ix.Version, version)
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
