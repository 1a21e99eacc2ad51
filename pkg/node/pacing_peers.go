package node

import (
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/node/pacing"
	"github.com/meshloc/meshloc/pkg/node/peers"
)

// backgroundUnits is what a relocation of obj asked with opts costs the
// pacing: 0 when it is not paced (foreground, pacing off, a draining node).
func (n *Node) backgroundUnits(obj keyspace.Object, opts RelocateOptions) float64 {
	if opts.Foreground || !n.pacing.Enabled() || n.draining.Load() {
		return 0
	}
	return n.relocationUnits(obj)
}

// awaitTarget waits, at most bound, for the headers of a background
// relocation's stream whose source offered to wait (its target admits it
// by its own pacing first), and learns the target's rate. It fails the
// relocation as deferred, with nothing done, when the headers do not come
// in time.
func (n *Node) awaitTarget(p *peers.RelocationStream, addr string, bound time.Duration) error {
	t := n.clock.AfterFunc(bound, p.Cancel)
	h, err := p.Header()
	if !t.Stop() || err != nil {
		n.pacing.Deferred()
		return fmt.Errorf("%w: the target %s paces background relocations and did not admit this one within %s", ErrRelocationDeferred, addr, bound)
	}
	if r, ok := pacing.RateOf(h); ok {
		n.peerPacing.Learn(addr, r, n.now())
	}
	return nil
}

// learnTarget learns a target's rate from the headers of a background
// relocation's stream that ended (they came with its first answer).
func (n *Node) learnTarget(p *peers.RelocationStream, addr string) {
	if h, err := p.Header(); err == nil {
		if r, ok := pacing.RateOf(h); ok {
			n.peerPacing.Learn(addr, r, n.now())
		}
	}
}
