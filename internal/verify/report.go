package verify

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// PhaseLoad is the load of one phase of a run (before, during, after the
// faults; or the whole run when there were none).
type PhaseLoad struct {
	Name      string  `json:"name"`
	Seconds   float64 `json:"seconds"`
	Ops       int     `json:"ops"`
	OK        int     `json:"ok"`
	OpsPerSec float64 `json:"okPerSec"`
}

// LoadFigures is the load a run held.
type LoadFigures struct {
	Clients   int         `json:"clients"`
	Objects   int         `json:"objects"`
	Ops       int         `json:"ops"`
	OK        int         `json:"ok"`
	Failed    int         `json:"failed"`
	Unknown   int         `json:"unknown"`
	OpsPerSec float64     `json:"okPerSec"`
	Phases    []PhaseLoad `json:"phases"`
	P50Ms     float64     `json:"p50Ms"`
	P99Ms     float64     `json:"p99Ms"`
	MaxMs     float64     `json:"maxMs"`
}

// Liveness is the result of the final reads after heal.
type Liveness struct {
	Objects    int      `json:"objects"`
	Readable   int      `json:"readable"`
	Unreadable []string `json:"unreadable,omitempty"`
	// Seconds from the heal until the last object answered.
	Seconds float64 `json:"seconds"`
}

// Totals are the headline figures.
type Totals struct {
	Lost            int `json:"lost"`
	DeclaredLost    int `json:"declaredLost"`
	Duplicated      int `json:"duplicated"`
	Unexpected      int `json:"unexpected"`
	StaleReads      int `json:"staleReads"`
	TwoOwnerWindows int `json:"twoOwnerWindows"`
	StaleAccepted   int `json:"staleRepliesAccepted"`
	Violations      int `json:"violations"`
}

// Report is the figures every verification run prints (docs/verification.md,
// "The pieces": report).
type Report struct {
	Started     time.Time       `json:"started"`
	Seconds     float64         `json:"seconds"`
	Load        LoadFigures     `json:"load"`
	Faults      map[string]int  `json:"faults"`
	FaultEvents []FaultEvent    `json:"faultEvents,omitempty"`
	Relocations RelocationCheck `json:"relocations"`
	Workloads   []Result        `json:"workloads"`
	Audit       *AuditResult    `json:"audit,omitempty"`
	Fences      FenceCheck      `json:"fences"`
	Exec        *ExecCheck      `json:"exec,omitempty"`
	Liveness    Liveness        `json:"liveness"`
	Totals      Totals          `json:"totals"`
	// Violations of every checker.
	Violations []Violation `json:"violations,omitempty"`
	// Figures the harness adds (e.g. "etcd": the members' HashKV at the
	// end), printed before the totals.
	Figures []Figure `json:"figures,omitempty"`
	// Planted is the planted-bug self-test's figure ("planted bugs detected
	// k/k"), when the harness knows it.
	Planted string `json:"planted,omitempty"`
	// Errors of the harness itself (a fault that could not be injected, an
	// audit that could not follow etcd): the run proves nothing then.
	Errors []string `json:"errors,omitempty"`
}

// Figure is one named line of the report.
type Figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Failed reports whether the run found a violation, could not read every
// object after heal, or could not measure what it claims.
func (r *Report) Failed() bool {
	return len(r.Violations) > 0 || len(r.Errors) > 0 || r.Liveness.Readable < r.Liveness.Objects
}

// JSON renders the report.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// Text renders the report as aligned text.
func (r *Report) Text() string {
	var b strings.Builder
	verdict := "PASS"
	if r.Failed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "verification %s: %.1fs, %d clients, %d objects\n", verdict, r.Seconds, r.Load.Clients, r.Load.Objects)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k string, v ...any) {
		fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprint(v...))
	}
	l := r.Load
	row("load held", fmt.Sprintf("%d ops (%d ok, %d failed, %d unknown), %.0f ok/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		l.Ops, l.OK, l.Failed, l.Unknown, l.OpsPerSec, l.P50Ms, l.P99Ms, l.MaxMs))
	for _, p := range l.Phases {
		row("  "+p.Name, fmt.Sprintf("%.0f ok/s (%d ok of %d in %.1fs)", p.OpsPerSec, p.OK, p.Ops, p.Seconds))
	}
	row("faults injected", kv(r.Faults))
	for _, f := range r.FaultEvents {
		e := ""
		if f.Err != "" {
			e = " error: " + f.Err
		}
		row("  "+f.Kind, fmt.Sprintf("%.2fs → %.2fs%s", float64(f.Start)/1e9, float64(f.End)/1e9, e))
	}
	rc := r.Relocations
	row("relocations", fmt.Sprintf("%d attempted: %s; %d commits in etcd", rc.Attempted, kv(rc.Results), rc.Committed))
	for _, k := range sortedKeys(rc.Samples) {
		if k != "completed" && len(rc.Samples[k]) > 0 {
			row("  e.g. "+k, rc.Samples[k][0])
		}
	}
	for _, w := range r.Workloads {
		extra := ""
		if len(w.Figures) > 0 {
			extra = "; " + kv64(w.Figures)
		}
		row("workload "+w.Workload, fmt.Sprintf("%s: %d ops on %d objects (%d ok, %d failed, %d unknown), acked %d, lost %d, declared lost %d, duplicated %d, unexpected %d, stale reads %d%s",
			w.Verdict, w.Ops, w.Objects, w.OK, w.Failed, w.Unknown, w.Acked, w.Lost, w.DeclaredLost, w.Duplicated, w.Unexpected, w.StaleReads, extra))
	}
	if a := r.Audit; a != nil {
		state := "complete"
		if a.Err != "" {
			state = "INCOMPLETE: " + a.Err
		}
		row("etcd audit", fmt.Sprintf("revisions %d..%d, %d events, %s; %d violations, group splits %d, %s", a.FromRevision, a.ToRevision, a.Events, kv(a.Transitions), len(a.Violations), a.GroupSplits, state))
	} else {
		row("etcd audit", "none")
	}
	if e := r.Exec; e != nil {
		row("execution logs", fmt.Sprintf("%d owners, %d entries, %d operations, two-owner windows %d, executed twice %d, re-executed after a declared loss %d, reminder due times %d (ran twice %d), durable reads %d, state claims %d and writes %d audited",
			e.Nodes, e.Entries, e.Operations, e.TwoOwnerWindows, e.DoubleExecutions, e.ReexecutedAfterLoss, e.ReminderFirings, e.RemindersTwice, e.Reads, e.StateClaims, e.StateWrites))
	} else {
		row("execution logs", "none (no log source)")
	}
	for _, f := range r.Figures {
		row(f.Name, f.Value)
	}
	lv := r.Liveness
	row("liveness after heal", fmt.Sprintf("%d/%d objects read in %.1fs %s", lv.Readable, lv.Objects, lv.Seconds, strings.Join(lv.Unreadable, " ")))
	t := r.Totals
	row("lost", t.Lost)
	row("declared lost", t.DeclaredLost, " (StateLost: memory objects of a crashed owner)")
	row("duplicated", t.Duplicated)
	row("unexpected", t.Unexpected)
	row("stale reads", t.StaleReads)
	row("two-owner windows", t.TwoOwnerWindows)
	row("stale replies accepted", t.StaleAccepted)
	row("violations", t.Violations)
	if r.Planted != "" {
		row("planted bugs", r.Planted)
	}
	tw.Flush()
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  ERROR %s\n", e)
	}
	for i, v := range r.Violations {
		if i == 30 {
			fmt.Fprintf(&b, "  … %d more violations (see the JSON report)\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func kv(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func kv64(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// loadFigures computes the load of the non-final ops between the workload's
// start and end, split at the faults.
func loadFigures(ops []Op, start, end int64, faults []FaultEvent) LoadFigures {
	var l LoadFigures
	var lat []time.Duration
	clients := map[int]bool{}
	objects := map[string]bool{}
	for _, o := range ops {
		if o.Final {
			continue
		}
		clients[o.Client] = true
		objects[o.Object] = true
		l.Ops++
		switch o.Outcome {
		case OK:
			l.OK++
			lat = append(lat, o.Latency())
		case Fail:
			l.Failed++
		case Unknown:
			l.Unknown++
		}
	}
	l.Clients, l.Objects = len(clients), len(objects)
	if end > start {
		l.OpsPerSec = float64(l.OK) / (float64(end-start) / 1e9)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	l.P50Ms, l.P99Ms, l.MaxMs = q(0.50), q(0.99), q(1)
	type window struct {
		name     string
		from, to int64
	}
	var ws []window
	if len(faults) == 0 {
		ws = []window{{"whole run", start, end}}
	} else {
		fs, fe := faults[0].Start, faults[0].End
		for _, f := range faults {
			fs, fe = min(fs, f.Start), max(fe, f.End)
		}
		fe = min(fe, end)
		ws = []window{{"before faults", start, fs}, {"during faults", fs, fe}, {"after faults", fe, end}}
	}
	for _, w := range ws {
		p := PhaseLoad{Name: w.name, Seconds: float64(w.to-w.from) / 1e9}
		for _, o := range ops {
			if o.Final || o.Call < w.from || o.Call >= w.to {
				continue
			}
			p.Ops++
			if o.Outcome == OK {
				p.OK++
			}
		}
		if p.Seconds > 0 {
			p.OpsPerSec = float64(p.OK) / p.Seconds
		}
		l.Phases = append(l.Phases, p)
	}
	return l
}
