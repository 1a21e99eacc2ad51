// Package report owns what a bench run produces: each measure, the figures
// judged against a baseline of the same run with their targets, the
// machine, and the report written as JSON, text or Markdown (and read back
// from JSON), and the comparison of a plaintext and a TLS run.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Measure is one measured number: a baseline, or the value of a Figure.
type Measure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// N is how many samples (operations, moves, bytes) the number is made of.
	N int64 `json:"n,omitempty"`
	// Note says what else happened while it was measured (failed moves, …).
	Note string `json:"note,omitempty"`
}

// Target is a bound on a Figure's ratio to its baseline.
type Target struct {
	// Op is "<=" (the ratio must be at most Ratio) or ">=".
	Op    string  `json:"op"`
	Ratio float64 `json:"ratio"`
}

func (t Target) String() string {
	if t.Op == "" {
		return ""
	}
	return fmt.Sprintf("%s %s×", map[string]string{"<=": "≤", ">=": "≥"}[t.Op], num(t.Ratio))
}

// AtMost and AtLeast are the targets "ratio ≤ r" and "ratio ≥ r".
func AtMost(r float64) *Target  { return &Target{Op: "<=", Ratio: r} }
func AtLeast(r float64) *Target { return &Target{Op: ">=", Ratio: r} }

// Met reports whether ratio meets the target.
func (t Target) Met(ratio float64) bool {
	switch t.Op {
	case "<=":
		return ratio <= t.Ratio
	case ">=":
		return ratio >= t.Ratio
	}
	return false
}

// Figure is a meshloc number beside the baseline it is judged against, both
// measured in the same run.
type Figure struct {
	Measure
	// Baseline is the Measure it is compared with (its Name, Value, Unit).
	Baseline Measure `json:"baseline"`
	// Ratio is Value / Baseline.Value (0 when the baseline is 0).
	Ratio float64 `json:"ratio"`
	// Target, when set, is the bound on Ratio, and Met says whether
	// this run met it. Figures without a target are shown for context.
	Target *Target `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
}

// NewFigure is m judged against base, with its target t (nil: none).
func NewFigure(m Measure, base Measure, t *Target) Figure {
	f := Figure{Measure: m, Baseline: base, Target: t}
	if base.Value != 0 {
		f.Ratio = m.Value / base.Value
	}
	if t != nil {
		// A share (%) may be 0 and meet a bound from above; any other
		// measure at 0 was not measured.
		met := (m.Value > 0 || m.Unit == "%" && t.Op == "<=") && base.Value > 0 && t.Met(f.Ratio)
		f.Met = &met
	}
	return f
}

// Machine describes where a run ran.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	OS     string `json:"os"`
	Go     string `json:"go"`
}

// Report is the result of one run.
type Report struct {
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	Plan      string    `json:"plan"`
	Machine   Machine   `json:"machine"`
	Baselines []Measure `json:"baselines"`
	Figures   []Figure  `json:"figures"`
	// TLS: the run was secured (mutual TLS, etcd over TLS with auth).
	TLS bool `json:"tls,omitempty"`
}

// Comparison is one measure of two runs of the same plan, plaintext and
// secured.
type Comparison struct {
	Name      string  `json:"name"`
	Unit      string  `json:"unit"`
	Plaintext float64 `json:"plaintext"`
	TLS       float64 `json:"tls"`
	// Ratio is TLS / Plaintext (0 when the plaintext value is 0).
	Ratio float64 `json:"ratio"`
}

// Compare puts every baseline and figure of a plaintext run beside the
// same one of a secured run (those both have).
func Compare(plain, secured *Report) []Comparison {
	var out []Comparison
	add := func(a, b Measure) {
		c := Comparison{Name: a.Name, Unit: a.Unit, Plaintext: a.Value, TLS: b.Value}
		if a.Value != 0 {
			c.Ratio = b.Value / a.Value
		}
		out = append(out, c)
	}
	for _, b := range plain.Baselines {
		if o := secured.Baseline(b.Name); o.Unit != "" {
			add(b, o)
		}
	}
	for _, f := range plain.Figures {
		if o := secured.Figure(f.Name); o.Unit != "" {
			add(f.Measure, o)
		}
	}
	return out
}

// WriteComparison writes Compare's table.
func WriteComparison(w io.Writer, cs []Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tPLAINTEXT\tMUTUAL TLS\tTLS/PLAIN\t")
	for _, c := range cs {
		m := func(v float64) string { return valueUnit(Measure{Value: v, Unit: c.Unit}) }
		fmt.Fprintf(tw, "%s	%s	%s	%s×	\n", c.Name, m(c.Plaintext), m(c.TLS), num(c.Ratio))
	}
	return tw.Flush()
}

// Missed lists the figures with a target this run did not meet.
func (r *Report) Missed() []Figure {
	var out []Figure
	for _, f := range r.Figures {
		if f.Met != nil && !*f.Met {
			out = append(out, f)
		}
	}
	return out
}

// Baseline is the baseline of that name (only its Name when none).
func (r *Report) Baseline(name string) Measure {
	for _, b := range r.Baselines {
		if b.Name == name {
			return b
		}
	}
	return Measure{Name: name}
}

// Figure is the measure of the figure of that name (only its Name when
// none).
func (r *Report) Figure(name string) Measure {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Measure
		}
	}
	return Measure{Name: name}
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteText writes the report as two tables: the baselines, then every
// figure with its baseline, ratio, target and whether it was met.
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "meshloc bench (%s plan), %s, %.0f s\n", r.Plan, r.Started.UTC().Format(time.RFC3339), r.Seconds)
	fmt.Fprintf(bw, "machine: %s, %d cores, %s memory, %s, %s\n\n", r.Machine.CPU, r.Machine.Cores, r.Machine.Memory, r.Machine.OS, r.Machine.Go)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BASELINE (same run)\tVALUE\tN\t")
	for _, b := range r.Baselines {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", b.Name, valueUnit(b), b.N, b.Note)
	}
	tw.Flush()
	fmt.Fprintln(bw)
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESHLOC FIGURE\tVALUE\tBASELINE\tRATIO\tTARGET\tMET\t")
	for _, f := range r.Figures {
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "met", false: "NOT MET"}[*f.Met]
		}
		tgt := ""
		if f.Target != nil {
			tgt = f.Target.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s×\t%s\t%s\t%s\n", f.Name, valueUnit(f.Measure), f.Baseline.Name, valueUnit(f.Baseline), num(f.Ratio), tgt, met, f.Note)
	}
	tw.Flush()
	met, with := r.targetsMet()
	fmt.Fprintf(bw, "\ntargets met: %d of %d\n", met, with)
	return bw.Flush()
}

// valueUnit prints a measure with its unit, to 3 significant digits.
func valueUnit(m Measure) string {
	if m.Unit == "" {
		return num(m.Value)
	}
	return num(m.Value) + " " + m.Unit
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1 || v <= -1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), CPU: "unknown", Memory: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.Memory = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return m
}
