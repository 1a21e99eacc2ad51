package node

import (
	"context"

	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
)

// sweepReplies prunes every hosted object's de-duplication table once per
// window: an object nobody calls any more then holds no replies (a table
// is pruned otherwise only when its object records a new reply, so a
// million idle objects would each keep the replies of their last calls).
// Nothing a caller can observe changes: a pruned reply is one the window
// had expired already.
func (n *Node) sweepReplies(ctx context.Context) {
	window := n.cfg.DedupWindow
	if window <= 0 {
		window = actor.DefaultReplyWindow
	}
	t := n.clock.NewTicker(window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			n.mu.Lock()
			hs := make([]*hosted.Object, 0, len(n.objects))
			for _, h := range n.objects {
				hs = append(hs, h)
			}
			n.mu.Unlock()
			for _, h := range hs {
				h.PruneReplies(now)
			}
		}
	}
}
