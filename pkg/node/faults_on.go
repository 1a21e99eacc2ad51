//go:build failpoints

package node

import (
	"context"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/lease"
	"github.com/meshloc/meshloc/pkg/node/faults"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/record"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A test build (tag failpoints): the named faults and the planted bugs of
// internal/failpoint, each wrapped around the seam where it acts. Nothing
// here exists in a production build (faults_off.go).

// stateStore wraps the node's state store with its faults.
func stateStore(s statestore.Store) statestore.Store { return faults.StateStore(s) }

func withFaults(s seams) seams {
	source, targetPeer, target, relay := s.source, s.targetPeer, s.target, s.relayReply
	s.source = func(mb *hosted.SourceMailbox, p relocator.Peer) (relocator.Store, relocator.Peer, relocator.SourceMailbox) {
		st, p, m := source(mb, p)
		return st, faults.SourcePeer(p), faults.SourceMailbox(m, mb.ID)
	}
	s.targetPeer = func(p relocator.Peer) relocator.Peer { return faults.TargetPeer(targetPeer(p)) }
	s.target = func(m *relocation.Target, mb *targetMailbox) (relocator.Store, relocator.TargetMailbox) {
		st, box := target(m, mb)
		return faults.Target(st, box, mb.bulk, mb.n.store.CommitWithoutCompare, func(req authority.CommitRequest) bool {
			return ackBeforeCommit(m, mb, req)
		})
	}
	seal := s.sessionSeal
	s.sessionSeal = func(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code {
		if failpoint.Hit(failpoint.SessionBeforeSeal) != nil {
			return pb.Code_CODE_UNAVAILABLE // never sent: the gateway stays open, bound to the source
		}
		return seal(ctx, ref, req)
	}
	route := s.sessionRoute
	s.sessionRoute = func(ref session.Ref, req *pb.SessionRouteRequest) pb.Code {
		if failpoint.Hit(failpoint.SessionBeforeRoute) != nil {
			return pb.Code_CODE_UNAVAILABLE // never sent: the gateway's seal times out
		}
		return route(ref, req)
	}
	send := s.sendMessage
	s.sendMessage = func(m actor.OutMessage, from *pb.MessageSender) *pb.CallReply {
		r := send(m, from)
		if failpoint.Hit(failpoint.MessageAfterSend) != nil {
			return &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "the answer was lost (failpoint " + failpoint.MessageAfterSend + ")"}
		}
		return r
	}
	s.relayReply = func(w *hosted.Work, r *pb.CallReply) {
		if failpoint.Hit(failpoint.TargetBeforeRelay) != nil {
			return // the relay is lost: the caller's retry gets the reply from the de-duplication table
		}
		relay(w, r)
	}
	return s
}

func bugWokenOwnerServes() bool  { return failpoint.Planted(failpoint.BugWokenOwnerServes) }
func bugNoGenerationCheck() bool { return failpoint.Planted(failpoint.BugNoGenerationCheck) }

// writeBehind: with the planted bug sleep-before-persist, durable changes
// are acknowledged unwritten and a sleep does not wait for them.
func writeBehind() bool { return failpoint.Planted(failpoint.BugSleepBeforePersist) }

// freshReminderOp: with the planted bug reminder-fresh-op, a firing sent again takes a fresh id.
func freshReminderOp(attempt int) bool {
	return attempt > 0 && failpoint.Planted(failpoint.BugReminderFreshOp)
}

// With the planted bug no-generation-check: a call's known generation is
// never seen, a re-created object's loss goes unsaid (the request runs on
// the fresh state), and an older fence is taken.
func knownGeneration(r *pb.CallRequest) int64 {
	if bugNoGenerationCheck() {
		return 0
	}
	return r.GetKnownObjectGeneration()
}

func stateLost(r *pb.CallReply) *pb.CallReply {
	if bugNoGenerationCheck() {
		return nil
	}
	return r
}

func acceptOlderFence() bool { return bugNoGenerationCheck() }

// leaseStatus: with the planted bug woken-owner-serves, the lease always
// looks valid, so an owner that lost it serves on.
func (n *Node) leaseStatus(now time.Time) lease.Status {
	if bugWokenOwnerServes() {
		return lease.Valid
	}
	return n.keeper.Status(now)
}

// recordSeen: with woken-owner-serves, the woken owner does not notice that
// etcd moved its objects away either.
func (n *Node) recordSeen(name string) (authority.Entry, bool) {
	if bugWokenOwnerServes() {
		return authority.Entry{}, true // seen at no version: never judged
	}
	return n.cache.EntryOf(name)
}

// Fenced is closed when the node's lease ended; with the planted bug
// woken-owner-serves, never: a fenced node serves on.
func (n *Node) Fenced() <-chan struct{} {
	if bugWokenOwnerServes() {
		return nil
	}
	return n.keeper.Done()
}

// replyLost is the answer of serveHere when node.before-reply fires with
// "error": the request executed, its reply is dropped. The gRPC handler
// (grpc.go) turns it into an UNAVAILABLE status error, so the caller sees
// the reply lost in transit and retries with the same operation id.
var replyLost = &pb.CallReply{Code: pb.Code_CODE_UNAVAILABLE, Message: "reply lost (failpoint " + failpoint.NodeBeforeReply + ")"}

// beforeReply is node.before-reply: an owner's reply (it carries the
// owner's fence: the request ran here, or its reply was relayed here)
// after the last lease check, about to leave. It runs on the RPC goroutine
// once the object's mailbox is free: a sleep holds only this reply.
func beforeReply(r *pb.CallReply) *pb.CallReply {
	if r.GetFence() != nil && failpoint.Hit(failpoint.NodeBeforeReply) != nil {
		return replyLost
	}
	return r
}

func replyWasLost(r *pb.CallReply) bool { return r == replyLost }

// drainStep is the failpoint drain, between a drain's objects.
func drainStep() error {
	if err := failpoint.Hit(failpoint.DrainStep); err != nil {
		return fmt.Errorf("failpoint %s: %w", failpoint.DrainStep, err)
	}
	return nil
}

// ackBeforeCommit is the planted bug ack-before-commit: the captured and
// DATA requests run on the hidden instances, under the fence the commit is
// about to write, and their replies are relayed before the commit
// transaction (correct code runs them only after it). It reports whether
// it ran anything (Admit then skips them). faults.Target calls it only
// with the bug planted.
func ackBeforeCommit(m *relocation.Target, mb *targetMailbox, req authority.CommitRequest) bool {
	n, data := mb.n, m.Data()
	pending := len(data)
	for _, h := range mb.hidden {
		h.Mu.Lock()
		if h.Mv != nil {
			pending += len(h.Mv.Captured)
		}
		h.Mu.Unlock()
	}
	if pending == 0 {
		return false
	}
	id := m.ID()
	for _, h := range mb.hidden {
		for _, p := range req.Participants {
			if p.Expected.Object.String() == h.Name() {
				planned := authority.Planned(p, n.self, n.selfNode, id.String())
				h.Mu.Lock()
				h.Fence, h.Version = record.Snapshot{Object: p.Expected.Object, Record: planned}.Fence(), p.Expected.StoreVersion
				h.Mu.Unlock()
			}
		}
		var ws []*hosted.Work
		h.Mu.Lock()
		if h.Mv != nil {
			ws, h.Mv.Captured = h.Mv.Captured, nil
			h.TidyLocked()
		}
		h.Mu.Unlock()
		for _, q := range data {
			if q.GetObject() != h.Name() {
				continue
			}
			if op, err := wire.ValidateCall(q); err == nil {
				ws = append(ws, &hosted.Work{Req: q, Op: op, Relay: hosted.RelayOf(q, id[:])})
			}
		}
		for _, w := range ws {
			h.Answer(w, h.Execute(w))
		}
	}
	return true
}
