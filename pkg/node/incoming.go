package node

import (
	"fmt"
	"sync"

	"github.com/meshloc/meshloc/pkg/wire"
)

// incoming counts the relocation stages this node receives, so that no peer
// can make it hold more than its bounds (Config.MaxIncomingStages,
// MaxIncomingStagesPerPeer, MaxIncomingBytes): the count of stages in
// flight, per source owner and in all, the payload bytes they announce, and
// the relocation ids in flight (a second stream for one relocation is
// refused).
type incoming struct {
	mu      sync.Mutex
	stages  int
	perPeer map[string]int
	bytes   uint64
	ids     map[wire.RelocationID]struct{}
}

// admit takes a slot for a stage of relocation id from peer announcing
// bytes. On success busy is "" and dup false, and release gives the slot
// back (once the stage ended); otherwise release does nothing and busy
// names the bound reached, or dup says the relocation is staged already.
func (in *incoming) admit(cfg *Config, id wire.RelocationID, peer string, bytes uint64) (busy string, dup bool, release func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.perPeer == nil {
		in.perPeer = map[string]int{}
		in.ids = map[wire.RelocationID]struct{}{}
	}
	switch {
	case hasKey(in.ids, id):
		return "", true, func() {}
	case in.stages >= cfg.MaxIncomingStages:
		return fmt.Sprintf("%d relocation stages in flight (--max-incoming-relocations)", in.stages), false, func() {}
	case in.perPeer[peer] >= cfg.MaxIncomingStagesPerPeer:
		return fmt.Sprintf("%d relocation stages in flight from %s (--max-incoming-relocations-per-peer)", in.perPeer[peer], peer), false, func() {}
	case in.bytes+bytes > uint64(cfg.MaxIncomingBytes):
		return fmt.Sprintf("%d payload bytes announced in flight, %d more asked (--max-incoming-relocation-bytes %d)", in.bytes, bytes, cfg.MaxIncomingBytes), false, func() {}
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
