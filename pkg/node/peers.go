package node

import "context"

// syncPeers keeps the pool's dialable addresses those of the live owners
// in the directory, until ctx ends.
func (n *Node) syncPeers(ctx context.Context) {
	for {
		ch := n.dir.Changed()
		n.syncPeersOnce()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (n *Node) syncPeersOnce() {
	live := map[string]string{}
	for _, o := range n.dir.List() {
		live[o.Descriptor.Address] = o.Descriptor.OwnerID
	}
	if k := n.peers.SetLive(live); k > 0 {
		n.log.Debug().Int("closed", k).Msg("closed connections to addresses of owners no longer alive")
	}
}
