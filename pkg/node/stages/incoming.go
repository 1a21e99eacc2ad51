// Package stages owns a node's bounds on relocation streams: what a
// target admits of incoming stages (each keyed by its relocation id and
// the hash of its PREPARE's nonce; counted in all, per peer, and by the
// payload bytes they announce), the tombstones of the stages that ended
// (a late or repeated PREPARE gets the same answer), and, as a source, the
// byte budgets of the chunks it has in flight.
package stages

import (
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Limits bound the stages a target holds at once (--max-incoming-relocations,
// --max-incoming-relocations-per-peer, --max-incoming-relocation-bytes).
type Limits struct {
	Stages, StagesPerPeer int
	Bytes                 int64
}

// Key names one target stage: its relocation id and the hash of its
// PREPARE's nonce. Relocation ids are public (etcd publishes them while a
// relocation is paced); the nonce is known only to the source until the
// commit. Keyed by both, a PREPARE someone else sent under a published id
// — refused, or staged and left hanging — never stands in the way of the
// real source's PREPARE, whose nonce differs.
type Key struct {
	id    wire.RelocationID
	nonce [sha256.Size]byte
}

// KeyOf is the key of p (its relocation id already parsed).
func KeyOf(id wire.RelocationID, p *pb.Prepare) Key {
	return Key{id: id, nonce: sha256.Sum256(p.GetNonce())}
}

// Incoming counts the relocation stages this node receives, so that no peer
// can make it hold more than its Limits: the count of stages in
// flight, per source owner and in all, the payload bytes they announce, and
// the stages in flight by key (a second stream for one relocation is
// refused).
type Incoming struct {
	mu      sync.Mutex
	stages  int
	perPeer map[string]int
	bytes   uint64
	ids     map[Key]struct{}
}

// Admit takes a slot for stage id from peer announcing
// bytes. On success busy is "" and dup false, and release gives the slot
// back (once the stage ended); otherwise release does nothing and busy
// names the bound reached, or dup says the relocation is staged already.
func (in *Incoming) Admit(lim Limits, id Key, peer string, bytes uint64) (busy string, dup bool, release func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.perPeer == nil {
		in.perPeer = map[string]int{}
		in.ids = map[Key]struct{}{}
	}
	switch {
	case hasKey(in.ids, id):
		return "", true, func() {}
	case in.stages >= lim.Stages:
		return fmt.Sprintf("%d relocation stages in flight (--max-incoming-relocations)", in.stages), false, func() {}
	case in.perPeer[peer] >= lim.StagesPerPeer:
		return fmt.Sprintf("%d relocation stages in flight from %s (--max-incoming-relocations-per-peer)", in.perPeer[peer], peer), false, func() {}
	case in.bytes+bytes > uint64(lim.Bytes):
		return fmt.Sprintf("%d payload bytes announced in flight, %d more asked (--max-incoming-relocation-bytes %d)", in.bytes, bytes, lim.Bytes), false, func() {}
	}
	in.stages++
	in.perPeer[peer]++
	in.bytes += bytes
	in.ids[id] = struct{}{}
	var once sync.Once
	return "", false, func() {
		once.Do(func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			in.stages--
			if in.perPeer[peer]--; in.perPeer[peer] <= 0 {
				delete(in.perPeer, peer)
			}
			in.bytes -= bytes
			delete(in.ids, id)
		})
	}
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}
