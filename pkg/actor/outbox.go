package actor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
)

// OutMessage is one message in an outbox: recorded by a handler, not yet
// answered by its destination.
type OutMessage struct {
	// ID is the message's operation id (MessageID).
	ID     wire.OperationID
	To     string
	Method string
	Args   [][]byte
	// Ask: the destination's answer goes to the sender's OnReply.
	Ask bool
	// Trace is the W3C traceparent of the traced turn that sent it (empty:
	// not traced). It lives in memory only: a message restored from a
	// persisted outbox starts a trace of its own.
	Trace string
}

// messageBytes is what m counts against an outbox's byte bound: its
// encoded size, about.
func messageBytes(m OutMessage) int {
	n := wire.IDLen + 1 + len(m.To) + len(m.Method) + 3*binary.MaxVarintLen16
	for _, a := range m.Args {
		n += len(a) + binary.MaxVarintLen32
	}
	return n
}

// Bounds of an outbox.
const (
	// DefaultOutboxMessages and DefaultOutboxBytes bound one object's
	// outbox unless the runtime is configured otherwise: a handler's Send
	// beyond them is refused with ErrOutboxFull.
	DefaultOutboxMessages = 1024
	DefaultOutboxBytes    = 1 << 20
	// MaxOutboxMessages and MaxOutboxBytes bound the configuration, and
	// what DecodeOutbox accepts.
	MaxOutboxMessages = 1 << 16
	MaxOutboxBytes    = 64 << 20
)

// Outbox is an object's outgoing messages not yet answered, in the order
// they were recorded. It is part of the object's state, like its Timers and
// ReplyTable: it travels with the object (Encode) and, for a durable type,
// is persisted with its state, so a message recorded once is delivered
// from wherever the object lives next. The zero value and nil are empty.
// Not safe for concurrent use.
type Outbox struct {
	entries []OutMessage
	bytes   int
}

// Len is the number of messages.
func (o *Outbox) Len() int {
	if o == nil {
		return 0
	}
	return len(o.entries)
}

// Bytes is what the messages count against the byte bound.
func (o *Outbox) Bytes() int {
	if o == nil {
		return 0
	}
	return o.bytes
}

// Entries are the messages in the order recorded (the outbox's own slices:
// read them, do not modify them).
func (o *Outbox) Entries() []OutMessage {
	if o == nil {
		return nil
	}
	return o.entries
}

// Has reports whether the message id is in the outbox.
func (o *Outbox) Has(id wire.OperationID) bool {
	return o != nil && slices.IndexFunc(o.entries, func(m OutMessage) bool { return m.ID == id }) >= 0
}

// Room reports whether n more messages of b bytes fit within the bounds
// (maxMessages, maxBytes ≤ 0: the defaults).
func (o *Outbox) Room(n, b, maxMessages, maxBytes int) bool {
	if maxMessages <= 0 {
		maxMessages = DefaultOutboxMessages
	}
	if maxBytes <= 0 {
		maxBytes = DefaultOutboxBytes
	}
	return o.Len()+n <= min(maxMessages, MaxOutboxMessages) && o.Bytes()+b <= min(maxBytes, MaxOutboxBytes)
}

// Fits reports whether msgs would fit beside the outbox's messages within
// the bounds (what Add checks, without the validation).
func (o *Outbox) Fits(msgs []OutMessage, maxMessages, maxBytes int) bool {
	b := 0
	for _, m := range msgs {
		b += messageBytes(m)
	}
	return o.Room(len(msgs), b, maxMessages, maxBytes)
}

// Add appends msgs (each checked with ValidateMessage; ids must be new)
// if they all fit within the bounds, else it adds none and returns
// ErrOutboxFull (or the message's ErrInvalidMessage). The args are copied.
func (o *Outbox) Add(msgs []OutMessage, maxMessages, maxBytes int) error {
	b := 0
	for i, m := range msgs {
		if err := ValidateMessage(m.To, m.Method, m.Args); err != nil {
			return err
		}
		if _, err := wire.ParseOperationIDBytes(m.ID[:]); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidMessage, err)
		}
		if o.Has(m.ID) || slices.ContainsFunc(msgs[:i], func(p OutMessage) bool { return p.ID == m.ID }) {
			return fmt.Errorf("%w: message %s recorded twice", ErrInvalidMessage, m.ID)
		}
		b += messageBytes(m)
	}
	if !o.Room(len(msgs), b, maxMessages, maxBytes) {
		return fmt.Errorf("%w: %d messages of %d bytes do not fit beside %d messages of %d bytes", ErrOutboxFull, len(msgs), b, o.Len(), o.Bytes())
	}
	for _, m := range msgs {
		m.Args = cloneArgs(m.Args)
		o.entries = append(o.entries, m)
	}
	o.bytes += b
	return nil
}

func cloneArgs(args [][]byte) [][]byte {
	if len(args) == 0 {
		return nil
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = bytes.Clone(a)
		if out[i] == nil {
			out[i] = []byte{}
		}
	}
	return out
}

// Remove takes the message id out of the outbox; false if it is not there.
func (o *Outbox) Remove(id wire.OperationID) (OutMessage, bool) {
	if o == nil {
		return OutMessage{}, false
	}
	i := slices.IndexFunc(o.entries, func(m OutMessage) bool { return m.ID == id })
	if i < 0 {
		return OutMessage{}, false
	}
	m := o.entries[i]
	o.entries = slices.Delete(o.entries, i, i+1)
	o.bytes -= messageBytes(m)
	if len(o.entries) == 0 {
		o.entries = nil // an object that has sent everything holds nothing
	}
	return m, true
}

// Oldest is the time of the oldest message id (its UUIDv7 time: that of
// the operation that caused it); false when the outbox is empty.
func (o *Outbox) Oldest() (time.Time, bool) {
	if o.Len() == 0 {
		return time.Time{}, false
	}
	at := idMs(o.entries[0].ID)
	for _, m := range o.entries[1:] {
		at = min(at, idMs(m.ID))
	}
	return msTime(at), true
}

// Clone is a deep copy.
func (o *Outbox) Clone() *Outbox {
	if o.Len() == 0 {
		return nil
	}
	c := &Outbox{entries: make([]OutMessage, len(o.entries)), bytes: o.bytes}
	for i, m := range o.entries {
		m.Args = cloneArgs(m.Args)
		c.entries[i] = m
	}
	return c
}

// Encoding of an Outbox, version 1 (the canonical form is the only one
// DecodeOutbox accepts; an empty outbox encodes as no bytes at all):
//
//	'O' 0x01 uvarint(count)
//	per message, in the order recorded:
//	  id[16] flags(1 byte: 1 = ask) uvarint(len) to uvarint(len) method
//	  uvarint(args) per arg: uvarint(len) arg
const (
	outboxMagic   = 'O'
	outboxVersion = 1
	// minOutMessage is the smallest encoded message: id, flags, a 13-byte
	// destination (actor/x/y), a method byte, three lengths.
	minOutMessage = wire.IDLen + 1 + 3 + len("actor/x/y") + 1
)

// Encode returns the canonical bytes of the outbox (nil when empty).
func (o *Outbox) Encode() []byte {
	if o.Len() == 0 {
		return nil
	}
	b := make([]byte, 0, 8+o.bytes)
	b = append(b, outboxMagic, outboxVersion)
	b = binary.AppendUvarint(b, uint64(len(o.entries)))
	for _, m := range o.entries {
		b = append(b, m.ID[:]...)
		var flags byte
		if m.Ask {
			flags = 1
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(m.To)))
		b = append(b, m.To...)
		b = binary.AppendUvarint(b, uint64(len(m.Method)))
		b = append(b, m.Method...)
		b = binary.AppendUvarint(b, uint64(len(m.Args)))
		for _, a := range m.Args {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
	}
	return b
}

// DecodeOutbox reads what Encode wrote (no bytes: an empty outbox, nil).
// Every error wraps ErrCorruptState: a bad header or version, more than
// MaxOutboxMessages messages or MaxOutboxBytes bytes, a message that
// ValidateMessage refuses, an id that is not a UUIDv7 or appears twice,
// unknown flags, trailing bytes, a form that is not canonical. It never
// allocates more than a small multiple of len(b).
func DecodeOutbox(b []byte) (*Outbox, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < 2 || b[0] != outboxMagic {
		return nil, fmt.Errorf("%w: outbox: not an outbox encoding", ErrCorruptState)
	}
	if b[1] != outboxVersion {
		return nil, fmt.Errorf("%w: outbox: unsupported version %d", ErrCorruptState, b[1])
	}
	if len(b) > MaxOutboxBytes+1<<16 {
		return nil, fmt.Errorf("%w: outbox: %d bytes, more than %d", ErrCorruptState, len(b), MaxOutboxBytes)
	}
	r := reader{b: b[2:]}
	n := r.uvarint("count")
	switch {
	case r.err != nil:
	case n == 0:
		r.fail("an empty outbox is encoded as no bytes")
	case n > MaxOutboxMessages:
		r.fail("%d messages, more than %d", n, MaxOutboxMessages)
	case n > uint64(r.left()/minOutMessage):
		r.fail("%d messages in %d bytes", n, r.left())
	}
	o := &Outbox{}
	if r.err == nil {
		o.entries = make([]OutMessage, 0, n)
	}
	seen := map[wire.OperationID]bool{}
	for i := uint64(0); i < n && r.err == nil; i++ {
		raw := r.bytes(wire.IDLen, "message id")
		flags := r.byte("flags")
		to := r.bytes(r.uvarint("destination length"), "destination")
		method := r.bytes(r.uvarint("method length"), "method")
		na := r.uvarint("argument count")
		if r.err == nil && na > uint64(wire.MaxArgs) {
			r.fail("message %d: %d arguments", i, na)
		}
		var args [][]byte
		for j := uint64(0); j < na && r.err == nil; j++ {
			a := r.bytes(r.uvarint("argument length"), "argument")
			if r.err == nil {
				args = append(args, bytes.Clone(a))
			}
		}
		if r.err != nil {
			break
		}
		id, err := wire.ParseOperationIDBytes(raw)
		if err != nil {
			r.fail("message %d: %v", i, err)
			break
		}
		if seen[id] {
			r.fail("message %d: id %s twice", i, id)
			break
		}
		seen[id] = true
		if flags > 1 {
			r.fail("message %d: unknown flags %#x", i, flags)
			break
		}
		m := OutMessage{ID: id, To: string(to), Method: string(method), Args: args, Ask: flags == 1}
		if err := ValidateMessage(m.To, m.Method, m.Args); err != nil {
			r.fail("message %d: %v", i, err)
			break
		}
		o.entries = append(o.entries, m)
		o.bytes += messageBytes(m)
		if o.bytes > MaxOutboxBytes {
			r.fail("more than %d bytes of messages", MaxOutboxBytes)
		}
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("%w: outbox: %v", ErrCorruptState, err)
	}
	if !bytes.Equal(o.Encode(), b) {
		return nil, fmt.Errorf("%w: outbox: not in canonical form", ErrCorruptState)
	}
	return o, nil
}
