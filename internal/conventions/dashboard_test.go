package conventions

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricDocs is every metric the references of docs/reference/ describe
// (generated from the registries: TestMetricsReference fails while one is
// stale), with its labels.
func metricDocs(t *testing.T) map[string]map[string]bool {
	t.Helper()
	row := regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| [^|]* \\| ([^|]*) \\|")
	label := regexp.MustCompile("`([a-z_][a-z0-9_]*)`")
	out := map[string]map[string]bool{}
	for _, page := range []string{"metrics-meshnode.md", "metrics-locationd.md"} {
		b, err := os.ReadFile(filepath.Join(root, "docs", "reference", page))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			ls := map[string]bool{"node": true} // meshnode's constant label
			for _, l := range label.FindAllStringSubmatch(m[2], -1) {
				ls[l[1]] = true
			}
			for l := range out[m[1]] {
				ls[l] = true
			}
			out[m[1]] = ls
		}
	}
	if len(out) == 0 {
		t.Fatal("no metric found in docs/reference")
	}
	return out
}

// queries is every PromQL expression of a Grafana dashboard: the panels'
// targets and the variables' queries.
func queries(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "expr" || k == "query") {
				*out = append(*out, s)
			}
			queries(e, out)
		}
	case []any:
		for _, e := range x {
			queries(e, out)
		}
	}
}

// The Grafana dashboard of deploy/grafana queries only metrics the nodes
// and locationd export, grouped by labels they have: a renamed metric or
// label fails here, not on an operator's screen.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "meshloc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/meshloc.json: %v", err)
	}
	docs := metricDocs(t)
	var exprs []string
	queries(dash, &exprs)
	name := regexp.MustCompile(`\bmeshloc_[a-z0-9_]+`)
	by := regexp.MustCompile(`\bby \(([^)]*)\)`)
	used := 0
	for _, e := range exprs {
		labels := map[string]bool{}
		for _, n := range name.FindAllString(e, -1) {
			base := n
			if _, ok := docs[n]; !ok {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok {
						if _, ok := docs[b]; ok {
							base = b
							if suf == "_bucket" {
								labels["le"] = true
							}
						}
					}
				}
			}
			ls, ok := docs[base]
			if !ok {
				t.Errorf("the dashboard queries %s, which no registry exports (%q)", n, e)
				continue
			}
			used++
			for l := range ls {
				labels[l] = true
			}
		}
		for _, m := range by.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !labels[l] {
					t.Errorf("the dashboard groups by %q, a label none of its metrics has (%q)", l, e)
				}
			}
		}
	}
	if used < 10 {
		t.Fatalf("the dashboard queries %d metrics: its expressions were not found", used)
	}
}
