package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// ReadJSON reads a report written by WriteJSON, so a saved run can be
// printed again (as text or Markdown) without measuring anything.
func ReadJSON(r io.Reader) (*Report, error) {
	var rep Report
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&rep); err != nil {
		return nil, fmt.Errorf("bench report: %w", err)
	}
	if rep.Plan == "" || rep.Started.IsZero() {
		return nil, fmt.Errorf("bench report: no plan or no start: not a report of meshctl -o json bench")
	}
	return &rep, nil
}

// WriteMarkdown writes the report as docs/performance.md shows it: a line on the
// run, the baselines, then every figure with its baseline, ratio and target.
func (r *Report) WriteMarkdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	met, with := r.targetsMet()
	fmt.Fprintf(bw, "%s plan, %.0f s, %s: %s, %d cores, %s, %s, %s. %d of the %d targets met.\n\n",
		r.Plan, r.Seconds, r.Started.UTC().Format("2006-01-02"), r.Machine.CPU, r.Machine.Cores, r.Machine.Memory, r.Machine.OS, r.Machine.Go, met, with)
	fmt.Fprintln(bw, "| baseline | value | samples |")
	fmt.Fprintln(bw, "|---|---|---|")
	for _, b := range r.Baselines {
		fmt.Fprintf(bw, "| %s | %s | %s |\n", cell(withNote(b.Name, b.Note)), mdValue(b), count(b.N))
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "| meshloc figure | value | baseline (same run) | ratio | target |")
	fmt.Fprintln(bw, "|---|---|---|---|---|")
	for _, f := range r.Figures {
		tgt := ""
		if f.Target != nil && f.Met != nil {
			tgt = f.Target.String() + map[bool]string{true: " met", false: " **not met**"}[*f.Met]
		}
		fmt.Fprintf(bw, "| %s | %s | %s %s | %s× | %s |\n", cell(withNote(f.Name, f.Note)), mdValue(f.Measure), cell(f.Baseline.Name), mdValue(f.Baseline), num(f.Ratio), tgt)
	}
	return bw.Flush()
}

func (r *Report) targetsMet() (met, with int) {
	for _, f := range r.Figures {
		if f.Met != nil {
			with++
			if *f.Met {
				met++
			}
		}
	}
	return met, with
}

func withNote(name, note string) string {
	if note == "" {
		return name
	}
	return name + " (" + note + ")"
}

// mdValue prints a measure as docs/performance.md does: milliseconds under one as
// microseconds, rates with thousands separated.
func mdValue(m Measure) string {
	switch {
	case m.Unit == "ms" && m.Value > 0 && m.Value < 1:
		return fmt.Sprintf("%.0f µs", m.Value*1000)
	case m.Unit == "/s" && m.Value >= 1000:
		return count(int64(m.Value+0.5)) + "/s"
	}
	return valueUnit(m)
}

// count prints n with a comma between each group of three digits.
func count(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// cell keeps a table cell on its row: a pipe in a name would split it.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
