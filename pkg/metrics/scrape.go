package metrics

import (
	"fmt"
	"io"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one value of a scrape in the text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseScrape reads a scrape in Prometheus' text format into its counter,
// gauge and untyped samples, sorted by name.
func ParseScrape(r io.Reader) ([]Sample, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the scrape: %w", err)
	}
	var out []Sample
	for name, f := range families {
		for _, m := range f.GetMetric() {
			v, ok := value(m)
			if !ok {
				continue
			}
			s := Sample{Name: name, Labels: map[string]string{}, Value: v}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Find returns the samples of name whose labels include every pair of
// want.
func Find(samples []Sample, name string, want map[string]string) []Sample {
	var out []Sample
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && s.Labels[k] == v
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}
