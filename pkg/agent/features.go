package agent

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/nodefeatures"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
	"github.com/rdma-cdi/rdma-cdi/pkg/topology"
)

// featureFile keeps topology.features_file current from each generation:
// the node's NFD labels, rewritten (atomically: NFD's worker watches the
// directory and skips the dot-named temp file) when they change, when the
// file moves and before NFD's expiry comes; a file a reload moved or
// turned off is removed. The whole file is rewritten, so a label the node
// no longer has is gone with it. It also logs why the subnets named no
// rail, once per change, for the rail attribute and label alike.
type featureFile struct {
	log logrus.FieldLogger

	path    string // where the last write went; "" for none
	labels  map[string]string
	expires time.Time
	notes   []string
}

// update takes one generation's node and config at now; an error leaves
// the state as it was, so the next generation tries again.
func (f *featureFile) update(node model.Node, cfg config.Config, now time.Time) error {
	rails, notes := topology.Rails(node, cfg.Topology)
	if !slices.Equal(notes, f.notes) {
		for _, n := range notes {
			f.log.Info("rails: " + n)
		}
		f.notes = notes
	}
	path := cfg.Topology.FeaturesFile
	if f.path != "" && f.path != path {
		if err := specio.Remove(f.path); err != nil {
			return err
		}
		f.log.Infof("NFD feature file %s removed (topology.features_file is now %q)", f.path, path)
		f.path, f.labels, f.expires = "", nil, time.Time{}
	}
	if path == "" {
		return nil
	}
	labels := nodefeatures.Labels(node, cfg, rails)
	lifetime := nodefeatures.Lifetime(cfg.Watch.RescanInterval.Duration)
	if f.path == path && maps.Equal(labels, f.labels) && !nodefeatures.Due(f.expires, lifetime, now) {
		return nil
	}
	var expires time.Time
	if lifetime > 0 {
		expires = now.Add(lifetime)
	}
	if err := specio.WriteAtomic(path, nodefeatures.File(labels, expires), specio.DefaultMode); err != nil {
		return err
	}
	if !maps.Equal(labels, f.labels) {
		f.log.Infof("NFD feature file %s: %s", path, labelList(labels))
	}
	f.path, f.labels, f.expires = path, labels, expires
	return nil
}

// labelList is labels as name=value, sorted, for the log.
func labelList(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, name+"="+labels[name])
	}
	return strings.Join(parts, " ")
}
