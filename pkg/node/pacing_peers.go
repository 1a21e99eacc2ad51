package node

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshloc/meshloc/pkg/keyspace"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
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

// peerPacing is what this node believes of its peers' pacing: the address
// of each that answered a finite rate, until when it is believed.
type peerPacing struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (pp *peerPacing) paced(addr string, now time.Time) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return now.Before(pp.until[addr])
}

func (pp *peerPacing) learn(addr string, rate float64, now time.Time) {
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

// backgroundUnits is what a relocation of obj asked with opts costs the
// pacing: 0 when it is not paced (foreground, pacing off, a draining node).
func (n *Node) backgroundUnits(obj keyspace.Object, opts RelocateOptions) float64 {
	if opts.Foreground || !n.pacing.cfg.Enabled() || n.draining.Load() {
		return 0
	}
	return n.relocationUnits(obj)
}

// withBackground is ctx carrying a background relocation's units, and the
// offer to wait, to its target.
func withBackground(ctx context.Context, units float64, wait bool) context.Context {
	kv := []string{mdBackground, strconv.FormatFloat(units, 'g', 6, 64)}
	if wait {
		kv = append(kv, mdBackgroundWait, "1")
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// backgroundOf reads a stream's claim (peer bytes: checked): its units,
// and whether its source waits; ok false for a foreground stream or one
// whose claim is malformed (then it is taken as foreground).
func backgroundOf(ctx context.Context) (units float64, wait, ok bool) {
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

// rateOf reads a target's answered rate; ok false when it answered none
// (a foreground stream, an older node) or a malformed one.
func rateOf(h metadata.MD) (float64, bool) {
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

func formatRate(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return strconv.FormatFloat(r, 'g', 6, 64)
}

// admitIncoming is the target's part for a background stream: a source
// that waits is admitted by this node's Pacer (at most half its
// relocation timeout; its source gives up sooner), one that does not is
// booked; then the headers answer this node's rate. A stream without a
// claim, or a node whose pacing is off, is not touched. An error ends the
// stream before anything was received.
func (n *Node) admitIncoming(stream rpcpb.PeerService_RelocateServer) error {
	units, wait, ok := backgroundOf(stream.Context())
	if !ok || !n.pacing.cfg.Enabled() {
		return nil
	}
	if !wait {
		// The headers go with the first answer: no frame of their own.
		n.book(units)
		_ = stream.SetHeader(metadata.Pairs(mdBackgroundRate, formatRate(n.BackgroundRate())))
		return nil
	}
	if _, err := n.pace(stream.Context(), units, n.cfg.RelocationTimeout/2); err != nil {
		return status.Error(codes.ResourceExhausted, "background relocation deferred: this node's calls are slow")
	}
	_ = stream.SendHeader(metadata.Pairs(mdBackgroundRate, formatRate(n.BackgroundRate()))) // the source waits for them
	return nil
}

// awaitTarget waits, at most bound, for the headers of a background
// relocation's stream whose source offered to wait (its target admits it
// by its own pacing first), and learns the target's rate. It fails the
// relocation as deferred, with nothing done, when the headers do not come
// in time.
func (n *Node) awaitTarget(p *clientPeer, addr string, bound time.Duration) error {
	t := n.clock.AfterFunc(bound, p.cancel)
	h, err := p.s.Header()
	if !t.Stop() || err != nil {
		n.metrics.deferred.Inc()
		return fmt.Errorf("%w: the target %s paces background relocations and did not admit this one within %s", ErrRelocationDeferred, addr, bound)
	}
	if r, ok := rateOf(h); ok {
		n.peerPacing.learn(addr, r, n.now())
	}
	return nil
}

// learnTarget learns a target's rate from the headers of a background
// relocation's stream that ended (they came with its first answer).
func (n *Node) learnTarget(p *clientPeer, addr string) {
	if h, err := p.s.Header(); err == nil {
		if r, ok := rateOf(h); ok {
			n.peerPacing.learn(addr, r, n.now())
		}
	}
}
