// Package session is meshloc's session protocol as pure data and a pure
// state machine: a session is an ordered, exactly-once stream between a
// client and one object, held by a gateway node (the session owner) and
// bound to the object's current owner.
//
//   - Journal is the object's side, kept by its owner and moved with it in a
//     relocation's payload: the pushes the client has not acknowledged (each
//     numbered, in order) and the last call executed. Calls run in seq order,
//     each once (a retry is answered from the object's de-duplication table).
//   - Gateway is the session owner's side: a machine (Step(Event) →
//     []Action) that forwards the client's calls one at a time in order,
//     delivers pushes in order without repeats, takes the object owner's
//     seal before a move (keeping calls meanwhile), its route after (then
//     forwards them to the new owner), binds again after a gateway crash
//     (the client resumes with its token) or a lost route, and refuses any
//     message that names another binding or owner (the session owner fence).
//
// No I/O, no clock (time comes in Tick), no goroutines: pkg/node drives it.
package session

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/tracing"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// ID is a session id (a UUIDv7).
type ID = wire.OperationID

// NewID returns a fresh session id.
func NewID() ID { return wire.NewOperationID() }

// Ref is the session owner fence: the session, its gateway (owner id,
// generation, routing id, address) and the binding the object's owner gave
// it. A message naming another is stale.
type Ref struct {
	Session    ID
	Gateway    string
	Generation int64
	RoutingID  wire.RoutingID
	Address    string
	Binding    uint64
}

// Proto is the wire form.
func (r Ref) Proto() *pb.SessionRef {
	return &pb.SessionRef{SessionId: r.Session[:], GatewayId: r.Gateway, GatewayGeneration: r.Generation,
		GatewayRoutingId: r.RoutingID[:], GatewayAddress: r.Address, Binding: r.Binding}
}

// SameGateway reports whether r and o name the same session at the same
// gateway (the binding aside).
func (r Ref) SameGateway(o Ref) bool {
	return r.Session == o.Session && r.Gateway == o.Gateway && r.Generation == o.Generation && r.RoutingID == o.RoutingID
}

// RefOf checks a ref from the network.
func RefOf(m *pb.SessionRef) (Ref, error) {
	id, err := wire.ParseOperationIDBytes(m.GetSessionId())
	if err != nil {
		return Ref{}, fmt.Errorf("%w: session id: %v", ErrInvalid, err)
	}
	rid, err := wire.ParseRoutingIDBytes(m.GetGatewayRoutingId())
	if err != nil {
		return Ref{}, fmt.Errorf("%w: gateway routing id: %v", ErrInvalid, err)
	}
	if m.GetGatewayId() == "" || len(m.GetGatewayId()) > wire.MaxOwnerIDLen || m.GetGatewayGeneration() <= 0 ||
		m.GetGatewayAddress() == "" || len(m.GetGatewayAddress()) > wire.MaxAddressLen {
		return Ref{}, fmt.Errorf("%w: gateway %q@%d at %q", ErrInvalid, m.GetGatewayId(), m.GetGatewayGeneration(), m.GetGatewayAddress())
	}
	return Ref{Session: id, Gateway: m.GetGatewayId(), Generation: m.GetGatewayGeneration(), RoutingID: rid,
		Address: m.GetGatewayAddress(), Binding: m.GetBinding()}, nil
}

// Push is one message from the object to its session's client.
type Push struct {
	Seq     uint64
	Payload []byte
	// Trace: the W3C traceparent of the turn that pushed it ("" when
	// that turn was not traced).
	Trace string
}

// Proto is the push's wire form.
func (p Push) Proto() *pb.Push {
	return &pb.Push{Seq: p.Seq, Payload: p.Payload, Traceparent: p.Trace}
}

// PushOf is a push from the wire; a traceparent that does not parse is
// dropped (tracing.Carry). Its seq and size are the caller's to check.
func PushOf(m *pb.Push) Push {
	return Push{Seq: m.GetSeq(), Payload: m.GetPayload(), Trace: tracing.Carry(m.GetTraceparent())}
}
