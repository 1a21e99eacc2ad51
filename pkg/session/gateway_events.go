package session

import (
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The gateway machine's events and actions (its Step is in gateway.go).

// Events.
type (
	// Event is an input of the gateway machine.
	Event interface{ event() }
	// Tick advances time (Unix ms).
	Tick struct{ NowMs int64 }
	// ClientCall is a call from the client.
	ClientCall struct {
		Seq    uint64
		Method string
		Args   [][]byte
		Op     []byte
		// Trace: the client's traceparent for the call, carried to the
		// Forward as it came ("": not traced).
		Trace string
	}
	// ClientAck: the client has every push up to Push.
	ClientAck struct{ Push uint64 }
	// ClientGone: the client's stream ended.
	ClientGone struct{}
	// Stop: the gateway node stops.
	Stop struct{}
	// BindResult is the result of Bind.
	BindResult struct {
		Code     pb.Code
		Message  string
		Binding  uint64
		Owner    Owner
		LastCall uint64
		// Hint: where the object is, when the node asked is not its owner.
		Hint string
		Err  error // no answer
	}
	// CallResult is the result of Forward.
	CallResult struct {
		Seq     uint64
		Binding uint64 // the Forward's
		Reply   *pb.CallReply
		Err     error // no answer (the owner unreachable)
	}
	// AckResult is the result of SendAck.
	AckResult struct {
		Binding uint64 // the SendAck's
		Err     error
	}
	// Delivery: pushes from the object's owner; answered by Answer.
	Delivery struct {
		Token   int
		From    Owner
		Binding uint64
		Pushes  []Push
	}
	// SealAsked: the object's owner is moving it; answered by Answer.
	SealAsked struct {
		Token        int
		RelocationID string
		From         Owner
		Binding      uint64
		TargetID     string
		TargetGen    int64
	}
	// RouteAsked ends a seal; answered by Answer.
	RouteAsked struct {
		Token        int
		RelocationID string
		Commit       bool
		From         Owner
		Binding      uint64
	}
)

func (Tick) event()       {}
func (ClientCall) event() {}
func (ClientAck) event()  {}
func (ClientGone) event() {}
func (Stop) event()       {}
func (BindResult) event() {}
func (CallResult) event() {}
func (AckResult) event()  {}
func (Delivery) event()   {}
func (SealAsked) event()  {}
func (RouteAsked) event() {}

// Actions.
type (
	// Action is an output of the gateway machine.
	Action interface{ action() }
	// Bind asks a node to bind the session: Address, or ("") the node the
	// gateway's routing picks for the object. Result: BindResult.
	Bind struct {
		Address               string
		Received, LastCall    uint64
		KnownObjectGeneration int64
	}
	// Forward sends a call to the owner; result: CallResult.
	Forward struct {
		Call    ClientCall
		Owner   Owner
		Binding uint64
	}
	// SendAck tells the owner the client has every push up to Push; result:
	// AckResult.
	SendAck struct {
		Owner   Owner
		Binding uint64
		Push    uint64
	}
	// ToClient sends a frame to the client.
	ToClient struct{ Frame *pb.SessionServerFrame }
	// Answer answers the RPC of an event's Token: Code, and Value (a
	// delivery's delivered seq, a seal's last forwarded call).
	Answer struct {
		Token   int
		Code    pb.Code
		Message string
		Value   uint64
	}
	// Close ends the session at this gateway (a SessionClosed frame went to
	// the client before it, unless the client is gone).
	Close struct {
		Code      pb.Code
		Message   string
		Resumable bool
	}
)

func (Bind) action()     {}
func (Forward) action()  {}
func (SendAck) action()  {}
func (ToClient) action() {}
func (Answer) action()   {}
func (Close) action()    {}
