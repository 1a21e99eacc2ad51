package node

import (
	"context"

	"github.com/meshloc/meshloc/internal/relocator"
	"github.com/meshloc/meshloc/pkg/actor"
	"github.com/meshloc/meshloc/pkg/node/internal/hosted"
	"github.com/meshloc/meshloc/pkg/relocation"
	"github.com/meshloc/meshloc/pkg/session"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// seams are where a relocation's I/O leaves the node: the store, the
// stream, the mailboxes, the relay of replies. Production builds use them
// as they are (faults_off.go); builds with the tag failpoints wrap them
// with the named faults and the planted bugs of internal/failpoint
// (faults_on.go), so that no fault is a branch of the code that runs in
// production.
type seams struct {
	// source gives a source relocation's store, stream and mailbox.
	source func(mb *hosted.SourceMailbox, peer relocator.Peer) (relocator.Store, relocator.Peer, relocator.SourceMailbox)
	// targetPeer wraps a target's stream before its first frame is read;
	// target gives a target stage's store and mailbox.
	targetPeer func(relocator.Peer) relocator.Peer
	target     func(m *relocation.Target, mb *targetMailbox) (relocator.Store, relocator.TargetMailbox)
	// relayReply sends the reply of a relocated request to its requester.
	relayReply func(w *hosted.Work, r *pb.CallReply)
	// sessionSeal asks a session's gateway to hold the client's calls
	// before a move (session_move.go); it answers the gateway's code.
	sessionSeal func(ctx context.Context, ref session.Ref, req *pb.SessionSealRequest) pb.Code
	// sessionRoute tells a session's gateway where its object is after a
	// move (session_move.go); it answers the gateway's code.
	sessionRoute func(ref session.Ref, req *pb.SessionRouteRequest) pb.Code
	// sendMessage delivers one message of an outbox and answers its
	// destination's reply (internal/hosted message_delivery.go).
	sendMessage func(m actor.OutMessage, from *pb.MessageSender) *pb.CallReply
}

// plainSeams are the node's seams without faults.
func (n *Node) plainSeams() seams {
	return seams{
		source: func(mb *hosted.SourceMailbox, p relocator.Peer) (relocator.Store, relocator.Peer, relocator.SourceMailbox) {
			return n.store, p, mb
		},
		targetPeer: func(p relocator.Peer) relocator.Peer { return p },
		target: func(_ *relocation.Target, mb *targetMailbox) (relocator.Store, relocator.TargetMailbox) {
			return n.store, mb
		},
		relayReply:   n.relayReply,
		sessionSeal:  n.sendSeal,
		sessionRoute: n.sendRoute,
		sendMessage:  n.sendMessage,
	}
}
