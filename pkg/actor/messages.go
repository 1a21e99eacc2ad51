package actor

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meshloc/meshloc/pkg/keyspace"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Messages between objects (docs/design.md §13). A handler's
// Context.Send (or Ask) records an outgoing message in the object's Outbox,
// in the same mailbox turn as the handler's change of state: the message
// is part of the request's effect. Its operation id is derived from the
// operation id of the turn that sent it and its index in that turn
// (MessageID), so a handler that runs again for the same operation (its
// first run's effects were lost with its state) sends the same ids, and
// the destination's ReplyTable executes each message once. After the turn,
// the runtime delivers the outbox in order per destination until each
// destination answers (Delivery decides what to send, when an entry is
// done, and what a refusal means). An Ask's answer comes back to the
// sender's OnReply, in a mailbox turn of its own whose operation id is
// derived from the message's (ReplyOperationID), which removes the entry
// from the outbox: it runs once.

// ReplyObject is implemented by types that Ask: OnReply receives the
// answer of each message they asked, once, in a mailbox turn of their own
// (like OnTimer). Its Context may Send and Ask again; an error it returns
// is logged and the turn's other effects are kept.
type ReplyObject interface {
	OnReply(ctx Context, r MessageReply) error
}

// MessageReply is the destination's answer to a message sent with Ask.
type MessageReply struct {
	// ID is the message's operation id.
	ID wire.OperationID
	// To, Method and Args are the message as it was sent.
	To     string
	Method string
	Args   [][]byte
	// Payload is the destination handler's reply (Err nil).
	Payload []byte
	// Err is nil when the destination executed the message and answered
	// OK. Otherwise it carries the destination's code (wire.CodeOf):
	// ErrRejected's CODE_APPLICATION_ERROR when its handler refused it, or
	// the refusal of a request that never ran (an unknown method, invalid
	// arguments), or ErrMessageExpired: the message was not acknowledged
	// within the de-duplication window and will never be delivered again.
	Err error
}

// Errors of messages.
var (
	// ErrInvalidMessage: Send or Ask with a destination that is not an
	// actor name, a method or arguments over the wire's bounds, or from a
	// turn that has no operation id; Ask from a type without OnReply.
	ErrInvalidMessage = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "actor: invalid message")
	// ErrOutboxFull: the object's outbox holds as many messages (or bytes)
	// as the runtime allows; nothing was recorded. The messages already
	// there leave as their destinations answer.
	ErrOutboxFull = wire.Sentinel(pb.Code_CODE_RESOURCE_EXHAUSTED, "actor: outbox full")
	// ErrMessageExpired (MessageReply.Err): no answer came within the
	// de-duplication window (the destination was unreachable, or answered
	// only with retryable refusals, for that long), so the destination
	// refuses the message as expired, or would: it is never sent again.
	// It did not execute after the window; whether an earlier attempt
	// executed it and only its answer was lost cannot be known.
	ErrMessageExpired = wire.Sentinel(pb.Code_CODE_OPERATION_EXPIRED, "actor: message expired: no answer within the de-duplication window")
)

// ValidateMessage checks a message a handler sends: to is an actor's
// canonical name (actor/<type>/<id>), the method and arguments are within
// the bounds of a call (pkg/wire). Errors wrap ErrInvalidMessage.
func ValidateMessage(to, method string, args [][]byte) error {
	obj, err := keyspace.ParseObject(to)
	switch {
	case err != nil:
		return fmt.Errorf("%w: destination: %v", ErrInvalidMessage, err)
	case obj.Kind != keyspace.KindActor || obj.String() != to:
		return fmt.Errorf("%w: destination %q is not an actor's canonical name (actor/<type>/<id>)", ErrInvalidMessage, to)
	case method == "" || len(method) > wire.MaxMethodLen:
		return fmt.Errorf("%w: method of %d bytes (want 1 to %d)", ErrInvalidMessage, len(method), wire.MaxMethodLen)
	case len(args) > wire.MaxArgs:
		return fmt.Errorf("%w: %d arguments (at most %d)", ErrInvalidMessage, len(args), wire.MaxArgs)
	}
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if n > wire.MaxArgsBytes {
		return fmt.Errorf("%w: %d argument bytes (at most %d)", ErrInvalidMessage, n, wire.MaxArgsBytes)
	}
	return nil
}

// Derivation tags: a message of an operation, the OnReply turn of a
// message, a timer tick's turn.
const (
	tagMessage = 'm'
	tagReply   = 'r'
	tagTimer   = 't'
)

// MessageID is the operation id of message index (0, 1, … in the order
// Send and Ask were called) of the turn whose operation id is parent. It
// is a UUIDv7 with parent's time: the same parent and index always give
// the same id, and the destination's window counts from the time of the
// operation that caused it (a chain of messages keeps its first
// operation's time). The other 74 bits are a hash of parent and index.
func MessageID(parent wire.OperationID, index uint32) wire.OperationID {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], index)
	return derive(parent[:6], tagMessage, parent[:], b[:])
}

// ReplyOperationID is the operation id of the OnReply turn that takes the
// answer of message msg (the parent of the messages that turn sends).
func ReplyOperationID(msg wire.OperationID) wire.OperationID {
	return derive(msg[:6], tagReply, msg[:])
}

// TimerOperationID is the operation id of the turn that handles tick index
// of timer name of object, fired at at: the parent of the messages OnTimer
// sends. Its time is the fire's: a tick that fires late still gives its
// messages a whole window.
func TimerOperationID(object, name string, index uint64, at time.Time) wire.OperationID {
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	var ix [8]byte
	binary.BigEndian.PutUint64(ix[:], index)
	return derive(ms[2:], tagTimer, []byte(object), []byte{0}, []byte(name), []byte{0}, ix[:])
}

// derive makes a UUIDv7 whose 48-bit time is ms and whose other bits are
// a SHA-256 of the tag and parts (the version and variant bits set).
func derive(ms []byte, tag byte, parts ...[]byte) wire.OperationID {
	h := sha256.New()
	h.Write([]byte("meshloc/v1 operation"))
	h.Write([]byte{tag})
	for _, p := range parts {
		h.Write(p)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var id wire.OperationID
	copy(id[:6], ms)
	copy(id[6:], sum[:10])
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 4122 variant
	if id == (wire.OperationID{}) {
		id[15] = 1 // unreachable: the version bits are set
	}
	return id
}
