//go:build !failpoints

package node

import (
	"time"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/statestore"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A production build: no faults at the seams, and every check of the node
// on. (faults_on.go is the test build's.)

func withFaults(s seams) seams { return s }

// stateStore is the node's state store as its objects use it.
func stateStore(s statestore.Store) statestore.Store { return s }

// The seams of the generation checks (a test build's no-generation-check
// acts at each): the object generation a call says its caller last saw;
// the state_lost answer to a call that met a re-created object (nil: none,
// the call runs); whether a reply with an older fence than one already
// seen is taken.
func knownGeneration(r *pb.CallRequest) int64 { return r.GetKnownObjectGeneration() }
func stateLost(r *pb.CallReply) *pb.CallReply { return r }
func acceptOlderFence() bool                  { return false }

// writeBehind is the seam of durable writes (hosted.Deps.WriteBehind; a
// test build's sleep-before-persist acts there): never.
func writeBehind() bool { return false }

// freshReminderOp is the seam of a firing's operation id: always its own.
func freshReminderOp(int) bool { return false }

// leaseStatus is the node's lease as every check before serving, firing a
// timer or sending reads it (a test build's woken-owner-serves lies here).
func (n *Node) leaseStatus(now time.Time) lease.Status { return n.keeper.Status(now) }

// recordSeen is the cache's entry of an object, as the node reads it to
// notice that etcd moved one of its objects away.
func (n *Node) recordSeen(name string) (authority.Entry, bool) { return n.cache.EntryOf(name) }

// Fenced is closed when the node's lease ended: it must not serve again.
func (n *Node) Fenced() <-chan struct{} { return n.keeper.Done() }

// beforeReply is where a test build pauses or loses an owner's reply
// (node.before-reply); replyWasLost tells the gRPC handler it did.
func beforeReply(r *pb.CallReply) *pb.CallReply { return r }
func replyWasLost(*pb.CallReply) bool           { return false }

// drainStep is where a test build stops a drain between objects (drain).
func drainStep() error { return nil }
