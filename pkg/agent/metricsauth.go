package agent

import (
	"fmt"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/metricsauth"
)

// metricsGuard is what metrics.auth puts in front of /metrics: nothing for
// none; for kubernetes, the API server's reviews as the pod's service
// account. An agent told kubernetes outside a pod fails its start rather
// than serve the holders to anyone.
func metricsGuard(cl CommandLine) (metrics.Guard, error) {
	switch auth := cl.Config.Metrics.Auth; auth {
	case config.MetricsAuthKubernetes:
		reviews, err := metricsauth.InCluster()
		if err != nil {
			return nil, fmt.Errorf("metrics.auth %s: %w", auth, err)
		}
		return metricsauth.New(reviews, metrics.Path, cl.Log).Wrap, nil
	default:
		return nil, nil
	}
}
