package api

// TimelineMark is one step of one side's timeline: it began at
// AtUnixMicros and lasted until the next step began.
type TimelineMark struct {
	Step         string `json:"step"`
	AtUnixMicros int64  `json:"atUnixMicros"`
}

// TimelinePhases are the phases of a relocation's timeline, in protocol
// order. A background relocation the node's pacing held back starts with
// pacing (waiting for the node to start it, nothing held: the object
// serves on). The source goes through intent, (precopy,) seal, state, ready
// (waiting for the target's READY), cutover (DATA and CUTOVER sent),
// commit (waiting for the target's commit) and settle (learning the
// outcome; preserve instead when it kept the object); the target through
// state (PREPARE until the payload is whole), ready (its restore),
// cutover (READY sent, waiting for CUTOVER), commit (its etcd
// transaction), admission (the captured and DATA requests run, admission
// opens) and settle (OUTCOME sent, the stage ends). The interruption runs
// from the source's seal to the target's admission.
var TimelinePhases = []string{"pacing", "intent", "precopy", "seal", "state", "ready", "cutover", "commit", "admission", "settle", "preserve"}

// optionalPhases are listed only when a side went through them.
var optionalPhases = map[string]bool{"pacing": true, "precopy": true, "preserve": true}

// PhaseTime is one phase of a relocation: how long each side spent in it,
// in microseconds (0: that side was not in it, or is in it now), and when
// it began there (0: never).
type PhaseTime struct {
	Phase                 string `json:"phase"`
	SourceMicros          int64  `json:"sourceMicros"`
	TargetMicros          int64  `json:"targetMicros"`
	SourceStartUnixMicros int64  `json:"sourceStartUnixMicros,omitempty"`
	TargetStartUnixMicros int64  `json:"targetStartUnixMicros,omitempty"`
}

// RelocationDetail answers GET /v1/relocations/{id}: the relocation as its
// source reports it (its target's report when the source does not answer),
// the other side's report, and the phases with the time both sides spent
// in each.
type RelocationDetail struct {
	Relocation
	Counterpart *Relocation `json:"counterpart,omitempty"`
	Phases      []PhaseTime `json:"phases"`
}

// Phases merges the two sides' timelines (either may be nil) into
// TimelinePhases: every phase of the protocol, and pacing, precopy and
// preserve where a side went through them.
func Phases(source, target *Relocation) []PhaseTime {
	type span struct{ start, micros int64 }
	spans := func(r *Relocation) map[string]span {
		out := map[string]span{}
		if r == nil {
			return out
		}
		for i, m := range r.Timeline {
			sp := out[m.Step]
			if sp.start == 0 {
				sp.start = m.AtUnixMicros
			}
			if i+1 < len(r.Timeline) {
				if d := r.Timeline[i+1].AtUnixMicros - m.AtUnixMicros; d > 0 {
					sp.micros += d
				}
			}
			out[m.Step] = sp
		}
		return out
	}
	src, tgt := spans(source), spans(target)
	out := make([]PhaseTime, 0, len(TimelinePhases))
	for _, p := range TimelinePhases {
		s, sok := src[p]
		t, tok := tgt[p]
		if optionalPhases[p] && !sok && !tok {
			continue
		}
		out = append(out, PhaseTime{Phase: p, SourceMicros: s.micros, TargetMicros: t.micros,
			SourceStartUnixMicros: s.start, TargetStartUnixMicros: t.start})
	}
	return out
}
