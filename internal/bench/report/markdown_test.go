package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A report written as JSON reads back the same and prints as the README's
// Markdown tables: units as a reader expects them, verdicts marked.
func TestMarkdownRoundTrip(t *testing.T) {
	r := &Report{Started: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Seconds: 140, Plan: "full", Machine: Machine{CPU: "x", Cores: 2, Memory: "1 GiB", OS: "linux/amd64", Go: "go1"}}
	base := Measure{Name: "raw gRPC unary p50", Value: 0.075, Unit: "ms", N: 6000}
	rate := Measure{Name: "raw | calls/s", Value: 35585.4, Unit: "/s", N: 177969, Note: "64 in flight"}
	r.Baselines = []Measure{base, rate}
	r.Figures = []Figure{
		NewFigure(Measure{Name: "call p50", Value: 0.099, Unit: "ms", N: 3000}, base, AtMost(1.3)),
		NewFigure(Measure{Name: "calls/s", Value: 30480, Unit: "/s"}, rate, AtLeast(0.8)),
		NewFigure(Measure{Name: "call p99", Value: 2.5, Unit: "ms"}, base, nil),
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&js)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := back.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"full plan, 140 s, 2026-12-02: x, 2 cores, 1 GiB, linux/amd64, go1. 1 of the 2 targets met.",
		"| raw gRPC unary p50 | 75 µs | 6,000 |",
		`| raw \| calls/s (64 in flight) | 35,585/s | 177,969 |`,
		"| call p50 | 99 µs | raw gRPC unary p50 75 µs | 1.32× | ≤ 1.30× **not met** |",
		`| calls/s | 30,480/s | raw \| calls/s 35,585/s | 0.857× | ≥ 0.8× met |`,
		"| call p99 | 2.50 ms | raw gRPC unary p50 75 µs | 33.3× |  |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("missing %q in\n%s", want, md.String())
		}
	}
	for _, bad := range []string{"", "{}", `{"plan":"full"}`, `{"plan":"full","started":"2026-12-02T10:00:00Z","extra":1}`, "[1]"} {
		if _, err := ReadJSON(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadJSON(%q) accepted it", bad)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
