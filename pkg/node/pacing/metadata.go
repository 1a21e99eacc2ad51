package pacing

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
)

// The target's share of background pacing. A source paces the
// relocations it starts by its own calls (pacing.go); their target pays
// for them too, and its calls may be the slow ones. So a background
// relocation's stream says so (metadata: its units), and its target books
// them against its own Pacer and answers, in the stream's headers, the
// rate it starts background work at. A source that learned that a target
// paces (a finite rate, within pacedBelief) offers to wait: the target
// then admits the stream by its Pacer before it sends the headers, and the
// source waits for them before it writes its intent — nothing is done
// while they wait. A source that did not offer is never held: a target
// cannot delay a relocation whose source may seal at once.
const (
	mdBackground     = "meshloc-background"      // the relocation's units (source → target)
	mdBackgroundWait = "meshloc-background-wait" // "1": the source waits for the headers
	mdBackgroundRate = "meshloc-background-rate" // the target's rate, units/s or "inf" (headers)
	// pacedBelief is how long a source believes a target that answered a
	// finite rate still paces.
	pacedBelief = time.Second
	// maxUnits bounds the units a stream may claim (a larger claim is no
	// claim: the stream is foreground).
	maxUnits = 1e6
)

// Peers is what this node believes of its peers' pacing: the address
// of each that answered a finite rate, until when it is believed.
type Peers struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// Paced reports whether the target at addr answered a finite rate
// recently enough to be believed still pacing at now.
func (pp *Peers) Paced(addr string, now time.Time) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return now.Before(pp.until[addr])
}

// Learn notes the rate the target at addr answered at now.
func (pp *Peers) Learn(addr string, rate float64, now time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if math.IsInf(rate, 1) {
		delete(pp.until, addr)
		return
	}
	if pp.until == nil {
		pp.until = map[string]time.Time{}
	}
	pp.until[addr] = now.Add(pacedBelief)
}

// WithBackground is ctx carrying a background relocation's units, and the
// offer to wait, to its target.
func WithBackground(ctx context.Context, units float64, wait bool) context.Context {
	kv := []string{mdBackground, strconv.FormatFloat(units, 'g', 6, 64)}
	if wait {
		kv = append(kv, mdBackgroundWait, "1")
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// BackgroundOf reads a stream's claim (peer bytes: checked): its units,
// and whether its source waits; ok false for a foreground stream or one
// whose claim is malformed (then it is taken as foreground).
func BackgroundOf(ctx context.Context) (units float64, wait, ok bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(mdBackground)
	if len(v) != 1 {
		return 0, false, false
	}
	u, err := strconv.ParseFloat(v[0], 64)
	if err != nil || !(u >= 1 && u <= maxUnits) {
		return 0, false, false
	}
	w := md.Get(mdBackgroundWait)
	return u, len(w) == 1 && w[0] == "1", true
}

// RateOf reads a target's answered rate; ok false when it answered none
// (a foreground stream, an older node) or a malformed one.
func RateOf(h metadata.MD) (float64, bool) {
	v := h.Get(mdBackgroundRate)
	if len(v) != 1 {
		return 0, false
	}
	if v[0] == "inf" {
		return math.Inf(1), true
	}
	r, err := strconv.ParseFloat(v[0], 64)
	if err != nil || !(r > 0 && r <= maxUnits) {
		return 0, false
	}
	return r, true
}

// RateHeader is the header a target answers its rate r in.
func RateHeader(r float64) metadata.MD { return metadata.Pairs(mdBackgroundRate, formatRate(r)) }

func formatRate(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return strconv.FormatFloat(r, 'g', 6, 64)
}
