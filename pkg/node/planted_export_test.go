//go:build failpoints

package node

import pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"

// AcceptFence exposes the gateway's fence check to the planted-bug tests
// (planted_fault_test.go).
func (n *Node) AcceptFence(object string, f *pb.Fence) bool { return n.fences.Accept(object, f) }
