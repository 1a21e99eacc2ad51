package promscrape_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/internal/promscrape"
)

func TestSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# TYPE a_total counter\na_total{k=\"x\"} 2\na_total{k=\"y\"} 3\n# TYPE g gauge\ng 7.5\n"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	if v, err := promscrape.Sum(ctx, addr, "a_total"); err != nil || v != 5 {
		t.Fatalf("a_total: %v %v", v, err)
	}
	if v, err := promscrape.Sum(ctx, addr, "g"); err != nil || v != 7.5 {
		t.Fatalf("g: %v %v", v, err)
	}
	if by, err := promscrape.SumBy(ctx, addr, "a_total", "k"); err != nil || len(by) != 2 || by["x"] != 2 || by["y"] != 3 {
		t.Fatalf("a_total by k: %v %v", by, err)
	}
	if _, err := promscrape.Sum(ctx, addr, "none"); !errors.Is(err, promscrape.ErrNoMetric) {
		t.Fatalf("absent metric: %v", err)
	}
}
