//go:build !failpoints

package node

import pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"

// A production build: no faults at the seams, and every check of the node
// on. (faults_on.go is the test build's.)

func withFaults(s seams) seams { return s }

// bugWokenOwnerServes and bugNoGenerationCheck are the two planted bugs of
// test builds that switch checks of the node's own off: never here.
func bugWokenOwnerServes() bool  { return false }
func bugNoGenerationCheck() bool { return false }

// Fenced is closed when the node's lease ended: it must not serve again.
func (n *Node) Fenced() <-chan struct{} { return n.keeper.Done() }

// beforeReply is where a test build pauses or loses an owner's reply
// (node.before-reply); replyWasLost tells the gRPC handler it did.
func beforeReply(r *pb.CallReply) *pb.CallReply { return r }
func replyWasLost(*pb.CallReply) bool           { return false }

// drainStep is where a test build stops a drain between objects (drain).
func drainStep() error { return nil }
