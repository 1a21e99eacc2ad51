// Package promscrape reads a metric off a process's Prometheus /metrics
// page: the one way meshloc's tests, benchmarks and checked runs look at
// another process's counters and gauges.
package promscrape

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrNoMetric: the page has no sample of the metric asked for.
var ErrNoMetric = errors.New("promscrape: no such metric")

// Sum is the sum of the samples (any labels) of counter, gauge or untyped
// metric name on the /metrics page served at addr (host:port).
func Sum(ctx context.Context, addr, name string) (float64, error) {
	by, err := SumBy(ctx, addr, name, "")
	return by[""], err
}

// SumBy is Sum split by the value of one label ("": not split; a sample
// without the label is summed under "").
func SumBy(ctx context.Context, addr, name, label string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("promscrape: %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("promscrape: %s/metrics: %w", addr, err)
	}
	fam := fams[name]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return nil, fmt.Errorf("%w: %s at %s", ErrNoMetric, name, addr)
	}
	sums := map[string]float64{}
	for _, m := range fam.GetMetric() {
		k := ""
		for _, l := range m.GetLabel() {
			if label != "" && l.GetName() == label {
				k = l.GetValue()
			}
		}
		sums[k] += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return sums, nil
}
