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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("promscrape: %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("promscrape: %s/metrics: %w", addr, err)
	}
	fam := fams[name]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return 0, fmt.Errorf("%w: %s at %s", ErrNoMetric, name, addr)
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return sum, nil
}
