package node

import "github.com/meshloc/meshloc/pkg/lease"

// DirectoryState is the state n's owner directory holds for owner id
// ("" when it has none): tests wait on it for a descriptor change to
// reach every node.
func (n *Node) DirectoryState(id string) lease.NodeState {
	o, ok := n.dir.Lookup(id)
	if !ok {
		return ""
	}
	return o.Descriptor.State
}

// CachedVersion is the store version n's location cache holds for the
// object named name (0: none): tests wait on it for a write to reach n.
func (n *Node) CachedVersion(name string) int64 {
	e, _ := n.cache.EntryOf(name)
	return e.Version
}
