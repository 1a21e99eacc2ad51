package node

import pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"

// Relocations lists relocations in flight and the most recent ended ones.
func (n *Node) Relocations() []*pb.RelocationStatus { return n.relocs.List() }
