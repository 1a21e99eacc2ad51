package relocation

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// PayloadMagic starts every relocation payload (see pb.Envelope).
const PayloadMagic = "MLRE"

// payloadHeaderLen is the magic and the envelope's 4-byte length.
const payloadHeaderLen = len(PayloadMagic) + 4

// ErrBadPayload: an assembled payload that is not an envelope followed by
// the states it declares. It wraps ErrProtocol: the source sent it (the
// payload's CRC32C matched PREPARE's).
var ErrBadPayload = fmt.Errorf("%w: malformed relocation payload", ErrProtocol)

// PayloadError is the error of DecodePayload: what is wrong, and where.
// errors.Is(err, ErrBadPayload) and errors.Is(err, ErrProtocol) hold.
type PayloadError struct {
	// Offset in the payload of the part at fault.
	Offset int
	// Reason says what is wrong.
	Reason string
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("%v: at byte %d: %s", ErrBadPayload, e.Offset, e.Reason)
}

// Unwrap makes the error match ErrBadPayload (and so ErrProtocol).
func (e *PayloadError) Unwrap() error { return ErrBadPayload }

func badPayload(off int, format string, args ...any) error {
	return &PayloadError{Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// EncodeEnvelope is the payload of a relocation whose participants are pss
// and their states: "MLRE", the length of the envelope as 4 bytes big
// endian, the pb.Envelope (version wire.Version, id, pss, the states left
// out), then each state in order, as it is (not copied: the states are the
// instances' snapshots, which are never modified). The payload is the
// concatenation of the returned slices; pss[i].StateLength must be
// len(states[i]).
func EncodeEnvelope(id wire.RelocationID, pss []*pb.ParticipantState, states [][]byte) ([][]byte, error) {
	return encodePayload(&pb.Envelope{Version: wire.Version, RelocationId: id[:], Participants: pss}, states)
}

// EncodeEnvelopeAligned is EncodeEnvelope with the envelope padded so
// that the states start at a multiple of align bytes, not before
// minStart, and at least room bytes after the envelope's own end
// (pre-copy: the states of the base and of the final payload then lie in
// the same chunks, whatever the envelopes' lengths, as long as the final
// one fits where the base's states began; the base leaves it room to
// grow). align ≤ 0: no padding.
func EncodeEnvelopeAligned(id wire.RelocationID, pss []*pb.ParticipantState, states [][]byte, align, minStart, room int) ([][]byte, error) {
	env := &pb.Envelope{Version: wire.Version, RelocationId: id[:], Participants: pss}
	if align > 0 {
		env.Padding = padding(proto.Size(env), align, max(minStart, payloadHeaderLen+proto.Size(env)+room))
	}
	return encodePayload(env, states)
}

// padding is the Envelope.padding that makes the payload's header (the
// magic, the length and an envelope of size bytes) a multiple of align,
// minStart at least. Each element costs a tag byte and its length's
// varint besides its bytes; where one element cannot fill the gap
// exactly (its length's varint would grow by a byte as it does), an empty
// element (two bytes) goes first.
func padding(size, align, minStart int) [][]byte {
	used := payloadHeaderLen + size
	for total := max(used, minStart, 1) + align - 1; ; total += align {
		total -= total % align
		for _, first := range []int{0, 2} {
			rem := total - used - first
			for k := 1; k <= 5; k++ {
				if p := rem - 1 - k; p >= 0 && protowireSize(uint64(p)) == k {
					if first > 0 {
						return [][]byte{{}, make([]byte, p)}
					}
					return [][]byte{make([]byte, p)}
				}
			}
		}
	}
}

// protowireSize is the length of v as a protobuf varint.
func protowireSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// encodePayload is EncodeEnvelope of any envelope.
func encodePayload(env *pb.Envelope, states [][]byte) ([][]byte, error) {
	hdr, err := proto.Marshal(env)
	if err != nil {
		return nil, err
	}
	if uint64(len(hdr)) > 1<<32-1 {
		return nil, fmt.Errorf("relocation: envelope of %d bytes does not fit its 4-byte length", len(hdr))
	}
	head := make([]byte, payloadHeaderLen, payloadHeaderLen+len(hdr))
	copy(head, PayloadMagic)
	binary.BigEndian.PutUint32(head[len(PayloadMagic):], uint32(len(hdr)))
	return append([][]byte{append(head, hdr...)}, states...), nil
}

// DecodePayload splits an assembled payload (what EncodeEnvelope wrote)
// into its envelope and each participant's state: sub-slices of payload,
// not copies, with no spare capacity. It checks the layout only: the
// magic, that the envelope's length and every participant's StateLength
// lie within the payload, and that the states end exactly where the
// payload does. The envelope's contents (version, participants) are the
// caller's to judge. Every error is a *PayloadError (ErrBadPayload, which
// wraps ErrProtocol).
func DecodePayload(payload []byte) (*pb.Envelope, [][]byte, error) {
	if len(payload) < payloadHeaderLen || string(payload[:len(PayloadMagic)]) != PayloadMagic {
		return nil, nil, badPayload(0, "payload does not start with %q", PayloadMagic)
	}
	hl := uint64(binary.BigEndian.Uint32(payload[len(PayloadMagic):payloadHeaderLen]))
	if hl > uint64(len(payload)-payloadHeaderLen) {
		return nil, nil, badPayload(len(PayloadMagic), "envelope of %d bytes in a payload of %d", hl, len(payload))
	}
	var env pb.Envelope
	if err := proto.Unmarshal(payload[payloadHeaderLen:payloadHeaderLen+int(hl)], &env); err != nil {
		return nil, nil, badPayload(payloadHeaderLen, "envelope: %v", err)
	}
	off := payloadHeaderLen + int(hl)
	rest := payload[off:]
	states := make([][]byte, len(env.GetParticipants()))
	for i, ps := range env.GetParticipants() {
		l := ps.GetStateLength()
		if l > uint64(len(rest)) {
			return nil, nil, badPayload(off, "state %d of %d bytes, %d left", i, l, len(rest))
		}
		states[i], rest = rest[:l:l], rest[l:]
		off += int(l)
	}
	if len(rest) != 0 {
		return nil, nil, badPayload(off, "%d bytes after the last state", len(rest))
	}
	return &env, states, nil
}

// statesAt is where the states of the payload segs (EncodeEnvelope's)
// start: after the magic, the envelope's length and the envelope. 0 for
// bytes that are not such a payload.
func statesAt(segs [][]byte) int {
	var head [payloadHeaderLen]byte
	if n := copy(head[:], Gather(segs, 0, uint64(payloadHeaderLen), nil)); n < payloadHeaderLen || string(head[:len(PayloadMagic)]) != PayloadMagic {
		return 0
	}
	return payloadHeaderLen + int(binary.BigEndian.Uint32(head[len(PayloadMagic):]))
}
