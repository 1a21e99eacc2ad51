package relocation

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

var envelopeID = wire.RelocationID{0x01, 0x93, 0x5c, 0x2e, 0x4a, 0x10, 0x70, 0x01, 0x80, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}

// envelopeParts are the participants and states of the test payloads: an
// actor; a group and two members (one with an empty state), as groups.go
// sends them.
func envelopeParts() [][]*pb.ParticipantState {
	call := &pb.CallRequest{Version: wire.Version, Object: "actor/counter/c1", Method: "add", Args: [][]byte{[]byte("1")}, OperationId: envelopeID[:]}
	one := []*pb.ParticipantState{{
		Participant: &pb.Participant{Object: "actor/counter/c1", Type: "counter", ObjectGeneration: 1, AuthorityGeneration: 2, StoreVersion: 42},
		StateLength: uint64(len(`{"v":1,"value":5}`)), Timers: []byte{1, 2}, Replies: []byte{3, 4}, Queued: []*pb.CallRequest{call},
	}}
	group := []*pb.ParticipantState{
		{Participant: &pb.Participant{Object: "group/g1", ObjectGeneration: 1, AuthorityGeneration: 1, StoreVersion: 7}},
		{Participant: &pb.Participant{Object: "actor/list/l1", Type: "list", ObjectGeneration: 3, AuthorityGeneration: 1, StoreVersion: 8}, StateLength: 3},
		{Participant: &pb.Participant{Object: "actor/blob/b1", Type: "blob", ObjectGeneration: 1, AuthorityGeneration: 4, StoreVersion: 9}},
	}
	return [][]*pb.ParticipantState{one, group, nil}
}

func envelopeStates() [][][]byte {
	return [][][]byte{{[]byte(`{"v":1,"value":5}`)}, {nil, []byte("abc"), {}}, nil}
}

func joinPayload(parts [][]byte) []byte { return bytes.Join(parts, nil) }

func TestEnvelopeRoundTrip(t *testing.T) {
	states := envelopeStates()
	for i, pss := range envelopeParts() {
		parts, err := EncodeEnvelope(envelopeID, pss, states[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 1+len(states[i]) {
			t.Fatalf("case %d: %d parts", i, len(parts))
		}
		for j, s := range states[i] {
			if len(s) > 0 && &parts[1+j][0] != &s[0] {
				t.Errorf("case %d: state %d was copied", i, j)
			}
		}
		payload := joinPayload(parts)
		if string(payload[:4]) != PayloadMagic || int(binary.BigEndian.Uint32(payload[4:8])) != len(parts[0])-8 {
			t.Fatalf("case %d: header %x", i, payload[:8])
		}
		env, got, err := DecodePayload(payload)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := &pb.Envelope{Version: wire.Version, RelocationId: envelopeID[:], Participants: pss}
		if !proto.Equal(env, want) {
			t.Fatalf("case %d: envelope %v, want %v", i, env, want)
		}
		if len(got) != len(states[i]) {
			t.Fatalf("case %d: %d states, want %d", i, len(got), len(states[i]))
		}
		off := len(parts[0])
		for j, s := range got {
			if !bytes.Equal(s, states[i][j]) || cap(s) != len(s) {
				t.Errorf("case %d: state %d = %q (capacity %d), want %q", i, j, s, cap(s), states[i][j])
			}
			if len(s) > 0 && &s[0] != &payload[off] {
				t.Errorf("case %d: state %d is not the payload's bytes", i, j)
			}
			off += len(s)
		}
	}
}

func TestDecodePayloadRefuses(t *testing.T) {
	good := joinPayload(must2(EncodeEnvelope(envelopeID, envelopeParts()[1], envelopeStates()[1])))
	hdr := func(magic string, n uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte(magic), n), rest...)
	}
	for name, p := range map[string][]byte{
		"empty":               nil,
		"short":               []byte("MLRE\x00\x00\x00"),
		"other magic":         hdr("MLRF", 0),
		"envelope past end":   hdr(PayloadMagic, 1),
		"envelope length max": hdr(PayloadMagic, 1<<32-1, 0, 0),
		"not protobuf":        hdr(PayloadMagic, 2, 0xff, 0xff),
		"state past end":      good[:len(good)-1],
		"trailing byte":       append(append([]byte(nil), good...), 0),
		"states, no envelope": hdr(PayloadMagic, 0, 'x'),
	} {
		env, states, err := DecodePayload(p)
		var pe *PayloadError
		if !errors.Is(err, ErrBadPayload) || !errors.Is(err, ErrProtocol) || !errors.As(err, &pe) || env != nil || states != nil {
			t.Errorf("%s: %v %v %v, want a *PayloadError", name, env, states, err)
			continue
		}
		if pe.Offset < 0 || pe.Offset > len(p) {
			t.Errorf("%s: offset %d in %d bytes", name, pe.Offset, len(p))
		}
	}
	// A header and no participant: nothing more to read.
	if env, states, err := DecodePayload(hdr(PayloadMagic, 0)); err != nil || len(states) != 0 || env.GetVersion() != 0 {
		t.Fatalf("empty envelope: %v %v %v", env, states, err)
	}
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// FuzzDecodePayload: DecodePayload never panics and refuses with a
// *PayloadError; what it accepts is consumed exactly (the header, the
// envelope's declared length and every declared state length add up to the
// payload, each state aliasing its bytes), and re-encodes to the same
// payload: byte for byte when the envelope is in protobuf's own encoding,
// otherwise to a payload that decodes to the same envelope and the same
// states, with the states' bytes unchanged.
func FuzzDecodePayload(f *testing.F) {
	states := envelopeStates()
	for i, pss := range envelopeParts() {
		p := joinPayload(must2(EncodeEnvelope(envelopeID, pss, states[i])))
		f.Add(p)
		f.Add(p[:len(p)-1])
	}
	f.Add([]byte("MLRE\x00\x00\x00\x00"))
	f.Add([]byte("MLRE\xff\xff\xff\xff"))
	f.Add([]byte("MLRE\x00\x00\x00\x02\x1a\x00"))         // one participant, no state length
	f.Add([]byte("MLRE\x00\x00\x00\x04\x1a\x02\x30\x05")) // one participant, 5 bytes it does not carry
	f.Add([]byte("MLRE\x00\x00\x00\x04\x1a\x02\x30\x01x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		payload := append([]byte(nil), in...)
		env, got, err := DecodePayload(payload)
		if err != nil {
			var pe *PayloadError
			if !errors.As(err, &pe) || !errors.Is(err, ErrBadPayload) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("untyped error %v", err)
			}
			if pe.Offset < 0 || pe.Offset > len(payload) || env != nil || got != nil {
				t.Fatalf("refused at offset %d of %d, with %v %v", pe.Offset, len(payload), env, got)
			}
			return
		}
		hl := int(binary.BigEndian.Uint32(payload[4:8]))
		if len(got) != len(env.GetParticipants()) {
			t.Fatalf("%d states for %d participants", len(got), len(env.GetParticipants()))
		}
		off := payloadHeaderLen + hl
		for i, ps := range env.GetParticipants() {
			s := got[i]
			if uint64(len(s)) != ps.GetStateLength() || cap(s) != len(s) {
				t.Fatalf("state %d: %d bytes (capacity %d), declared %d", i, len(s), cap(s), ps.GetStateLength())
			}
			if len(s) > 0 && &s[0] != &payload[off] {
				t.Fatalf("state %d does not alias the payload at %d", i, off)
			}
			off += len(s)
		}
		if off != len(payload) {
			t.Fatalf("consumed %d of %d bytes", off, len(payload))
		}

		parts, err := encodePayload(env, got)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again := joinPayload(parts)
		canonical, err := proto.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(canonical, payload[payloadHeaderLen:payloadHeaderLen+hl]) {
			if !bytes.Equal(again, payload) {
				t.Fatalf("re-encoded %x, decoded %x", again, payload)
			}
		} else if !bytes.Equal(again[len(parts[0]):], payload[payloadHeaderLen+hl:]) {
			t.Fatal("re-encoding changed the states")
		}
		env2, got2, err := DecodePayload(again)
		if err != nil || !proto.Equal(env, env2) || len(got2) != len(got) {
			t.Fatalf("decode of the re-encoded payload: %v\n%v\n%v", err, env, env2)
		}
		for i := range got {
			if !bytes.Equal(got[i], got2[i]) {
				t.Fatalf("state %d changed: %x, %x", i, got[i], got2[i])
			}
		}
		// EncodeEnvelope writes what the node sends: the version, the id and
		// the participants; unknown envelope fields are not among them, nor
		// padding (EncodeEnvelopeAligned's).
		if v := env.GetVersion(); v == wire.Version && len(env.ProtoReflect().GetUnknown()) == 0 && len(env.GetPadding()) == 0 {
			if id, err := wire.ParseRelocationIDBytes(env.GetRelocationId()); err == nil {
				if b := joinPayload(must2(EncodeEnvelope(id, env.GetParticipants(), got))); !bytes.Equal(b, again) {
					t.Fatalf("EncodeEnvelope wrote %x, the envelope's re-encoding %x", b, again)
				}
			}
		}
	})
}
