package agent

import (
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMetricsAuthNoneServesOpen(t *testing.T) {
	var cl CommandLine
	cl.Log = logrus.New()
	cl.Config.Metrics.Auth = "none"
	if guard, err := metricsGuard(cl); guard != nil || err != nil {
		t.Errorf("metrics.auth none: a guard (%v) or an error %v", guard != nil, err)
	}
}
