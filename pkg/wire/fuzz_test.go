package wire_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Fuzz targets of the decoders. Their seed corpora are the f.Add calls below
// and testdata/fuzz/<Name>/; run one with, e.g.,
//
//	go test -run '^$' -fuzz '^FuzzCallRequest$' -fuzztime 20s ./pkg/wire/
//
// and keep any crasher it writes to testdata/fuzz as a regression seed.

func mustMarshal(f *testing.F, m proto.Message) []byte {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// seedOperationID is fixed so the seeds are the same on every run.
var seedOperationID = wire.OperationID{0x01, 0x93, 0x5c, 0x2e, 0x4a, 0x10, 0x70, 0x01, 0x80, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}

func seedCall() *pb.CallRequest {
	return &pb.CallRequest{
		Version: wire.Version, Object: "actor/counter/c1", Method: "add",
		Args: [][]byte{[]byte("1")}, OperationId: seedOperationID[:],
	}
}

func seedFence() *pb.Fence {
	return &pb.Fence{
		OwnerId: "n1", OwnerGeneration: 7, RoutingId: []byte("0123456789abcdef"),
		ObjectGeneration: 1, AuthorityGeneration: 2, StoreVersion: 42,
	}
}

// validateCodes are the codes ValidateCall may answer with.
var validateCodes = map[pb.Code]bool{
	pb.Code_CODE_PROTOCOL_ERROR:       true,
	pb.Code_CODE_INVALID_ARGUMENT:     true,
	pb.Code_CODE_PAYLOAD_TOO_LARGE:    true,
	pb.Code_CODE_INVALID_OPERATION_ID: true,
	pb.Code_CODE_UNAVAILABLE:          true,
}

// checkCall is what must hold for any decoded call request.
func checkCall(t *testing.T, r *pb.CallRequest) {
	t.Helper()
	id, verr := wire.ValidateCall(r)
	if verr != nil {
		if !validateCodes[verr.Code] {
			t.Fatalf("ValidateCall answered %v (%v)", verr.Code, verr)
		}
		if !id.IsZero() {
			t.Fatalf("refused request returned id %v", id)
		}
		return
	}
	if id.IsZero() || string(id[:]) != string(r.GetOperationId()) {
		t.Fatalf("accepted with id %v, request carries %x", id, r.GetOperationId())
	}
	n := 0
	for _, a := range r.GetArgs() {
		n += len(a)
	}
	switch {
	case r.GetVersion() != wire.Version:
		t.Fatalf("accepted version %d", r.GetVersion())
	case len(r.GetObject()) == 0 || len(r.GetObject()) > wire.MaxObjectLen:
		t.Fatalf("accepted object of %d bytes", len(r.GetObject()))
	case len(r.GetMethod()) == 0 || len(r.GetMethod()) > wire.MaxMethodLen:
		t.Fatalf("accepted method of %d bytes", len(r.GetMethod()))
	case len(r.GetArgs()) > wire.MaxArgs || n > wire.MaxArgsBytes:
		t.Fatalf("accepted %d arguments of %d bytes", len(r.GetArgs()), n)
	case r.GetHops() > wire.MaxHops:
		t.Fatalf("accepted %d hops", r.GetHops())
	case r.GetSender() != nil && (r.GetSender().GetFence() == nil || r.GetSender().GetObject() == "" || r.GetSession() != nil):
		t.Fatalf("accepted a message sender %v", r.GetSender())
	}
	_ = id.Time()
	_ = id.String()
}

// roundTrip re-marshals m and checks the decoded copy is equal.
func roundTrip[M proto.Message](t *testing.T, m M, fresh M) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("re-marshal of a decoded message: %v", err)
	}
	if err := proto.Unmarshal(b, fresh); err != nil {
		t.Fatalf("decode of a re-marshalled message: %v", err)
	}
	if !proto.Equal(m, fresh) {
		t.Fatalf("round trip changed the message:\n%v\n%v", m, fresh)
	}
}

func FuzzCallRequest(f *testing.F) {
	full := seedCall()
	full.Requester = &pb.Requester{OwnerId: "n2", OwnerGeneration: 3, RoutingId: []byte("fedcba9876543210"), Address: "127.0.0.1:7100", ReplyRoute: 9}
	full.Hops, full.Direct, full.KnownObjectGeneration = 2, true, 5
	over := seedCall()
	over.Hops = wire.MaxHops + 1
	longMethod := seedCall()
	longMethod.Method = strings.Repeat("m", wire.MaxMethodLen+1)
	manyArgs := seedCall()
	manyArgs.Args = make([][]byte, wire.MaxArgs+1)
	wrongVersion := seedCall()
	wrongVersion.Version = 2
	message := seedCall()
	message.Sender = &pb.MessageSender{Object: "actor/bank/b1", Fence: &pb.Fence{OwnerId: "n1", OwnerGeneration: 4, ObjectGeneration: 1, AuthorityGeneration: 2}}
	noFence := seedCall()
	noFence.Sender = &pb.MessageSender{Object: "actor/bank/b1"}
	for _, m := range []*pb.CallRequest{seedCall(), full, over, longMethod, manyArgs, wrongVersion, message, noFence, {}} {
		f.Add(mustMarshal(f, m))
	}
	b := mustMarshal(f, full)
	f.Add(b[:len(b)/2])                   // truncated
	f.Add(append(b, 0xba, 0x06, 0x01))    // unknown field 103, length prefix past the end
	f.Add(append(b, 0xb8, 0x06, 0x01))    // unknown varint field 103
	f.Add([]byte{0x12, 0x02, 0xff, 0xfe}) // object that is not UTF-8
	f.Add([]byte{0xff, 0xff, 0xff, 0x07, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.CallRequest
		if err := proto.Unmarshal(data, &r); err != nil {
			return
		}
		checkCall(t, &r)
		if _, err := wire.ValidateCall(&r); err == nil {
			var back pb.CallRequest
			roundTrip(t, &r, &back)
			if _, err := wire.ValidateCall(&back); err != nil {
				t.Fatalf("valid request is invalid after a round trip: %v", err)
			}
		}
	})
}

func FuzzRelocationFrame(f *testing.F) {
	rid := seedOperationID
	frames := []*pb.RelocationFrame{
		{Frame: &pb.RelocationFrame_Prepare{Prepare: &pb.Prepare{
			Version: wire.Version, RelocationId: rid[:], Coordinator: seedFence(), Target: seedFence(),
			Participants: []*pb.Participant{
				{Object: "actor/counter/c1", Type: "counter", ObjectGeneration: 1, AuthorityGeneration: 2, StoreVersion: 42},
				{Object: "actor/list/l1", Type: "list", ObjectGeneration: 3, AuthorityGeneration: 1, StoreVersion: 40},
			},
			PayloadLength: 1 << 16, ChunkCount: 2, ApplicationVersion: "1", DeadlineUnixMs: 1_700_000_000_000,
		}}},
		{Frame: &pb.RelocationFrame_Chunk{Chunk: &pb.StateChunk{RelocationId: rid[:], Index: 1, Data: []byte("state bytes")}}},
		{Frame: &pb.RelocationFrame_Ready{Ready: &pb.Ready{RelocationId: rid[:]}}},
		{Frame: &pb.RelocationFrame_Failed{Failed: &pb.Failed{RelocationId: rid[:], Code: pb.Code_CODE_STALE_FENCE, Message: "stale"}}},
		{Frame: &pb.RelocationFrame_Data{Data: &pb.Data{RelocationId: rid[:], Sequence: 3, Request: seedCall()}}},
		{Frame: &pb.RelocationFrame_Cutover{Cutover: &pb.Cutover{RelocationId: rid[:], DataCount: 3}}},
		{Frame: &pb.RelocationFrame_Outcome{Outcome: &pb.Outcome{RelocationId: rid[:], Code: pb.Code_CODE_OK, Committed: seedFence()}}},
		{Frame: &pb.RelocationFrame_Precopied{Precopied: &pb.Precopied{RelocationId: rid[:]}}},
		{Frame: &pb.RelocationFrame_Sealed{Sealed: &pb.Sealed{RelocationId: rid[:], PayloadLength: 1 << 20, ChunkCount: 16, Crc32C: 7, Changed: []uint32{0, 3, 15}}}},
		{},
	}
	for _, fr := range frames {
		f.Add(mustMarshal(f, fr))
	}
	// Two frames concatenated: the last oneof wins.
	f.Add(append(mustMarshal(f, frames[1]), mustMarshal(f, frames[2])...))
	f.Add(mustMarshal(f, frames[0])[:20])
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10}) // a length past any limit
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr pb.RelocationFrame
		if err := proto.Unmarshal(data, &fr); err != nil {
			return
		}
		var rid []byte
		switch x := fr.GetFrame().(type) {
		case *pb.RelocationFrame_Prepare:
			rid = x.Prepare.GetRelocationId()
		case *pb.RelocationFrame_Chunk:
			rid = x.Chunk.GetRelocationId()
		case *pb.RelocationFrame_Ready:
			rid = x.Ready.GetRelocationId()
		case *pb.RelocationFrame_Failed:
			rid = x.Failed.GetRelocationId()
			_ = wire.CodeName(x.Failed.GetCode())
		case *pb.RelocationFrame_Data:
			rid = x.Data.GetRelocationId()
			if req := x.Data.GetRequest(); req != nil {
				checkCall(t, req)
			}
		case *pb.RelocationFrame_Cutover:
			rid = x.Cutover.GetRelocationId()
		case *pb.RelocationFrame_Outcome:
			rid = x.Outcome.GetRelocationId()
			_ = wire.CodeName(x.Outcome.GetCode())
		case *pb.RelocationFrame_Precopied:
			rid = x.Precopied.GetRelocationId()
		case *pb.RelocationFrame_Sealed:
			rid = x.Sealed.GetRelocationId()
		case nil:
		default:
			t.Fatalf("unknown frame %T", x)
		}
		if id, err := wire.ParseRelocationIDBytes(rid); err == nil {
			if string(id[:]) != string(rid) || id == (wire.RelocationID{}) {
				t.Fatalf("relocation id %x parsed as %v", rid, id)
			}
		} else if !errors.Is(err, wire.ErrInvalidID) {
			t.Fatalf("relocation id %x: untyped error %v", rid, err)
		}
		var back pb.RelocationFrame
		roundTrip(t, &fr, &back)
	})
}

func FuzzParseOperationID(f *testing.F) {
	s := seedOperationID.String()
	for _, seed := range []string{
		s, strings.ToUpper(s), strings.ReplaceAll(s, "-", ""), "urn:uuid:" + s, "{" + s + "}",
		"00000000-0000-0000-0000-000000000000", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "", "x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		id, err := wire.ParseOperationID(text)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidOperationID) {
				t.Fatalf("%q: untyped error %v", text, err)
			}
			return
		}
		if id.IsZero() {
			t.Fatalf("%q parsed as the zero id", text)
		}
		again, err := wire.ParseOperationID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q → %v → %v %v", text, id, again, err)
		}
		if b, err := wire.ParseOperationIDBytes(id[:]); err != nil || b != id {
			t.Fatalf("%q: bytes form refused: %v", text, err)
		}
		_ = id.Time()
	})
}

func FuzzParseRoutingIDHex(f *testing.F) {
	for _, seed := range []string{
		"000102030405060708090a0b0c0d0e0f", "000102030405060708090A0B0C0D0E0F", "00000000000000000000000000000000",
		"000102030405060708090a0b0c0d0e0", "000102030405060708090a0b0c0d0e0f00", "0x0102030405060708090a0b0c0d0e0f", "", "zz",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		r, err := wire.ParseRoutingIDHex(text)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidID) {
				t.Fatalf("%q: untyped error %v", text, err)
			}
			if r != (wire.RoutingID{}) {
				t.Fatalf("%q: refused but returned %v", text, r)
			}
			return
		}
		if r.Hex() != strings.ToLower(text) {
			t.Fatalf("%q parsed as %s", text, r.Hex())
		}
		if !r.Equal(r[:]) {
			t.Fatalf("%v is not equal to its bytes", r)
		}
		if again, err := wire.ParseRoutingIDHex(r.Hex()); err != nil || again != r {
			t.Fatalf("%q → %v → %v %v", text, r, again, err)
		}
	})
}

// A relocation id in a URL path (GET /v1/relocations/{id}): a typed error,
// or an id whose text parses back to it.
func FuzzParseRelocationID(f *testing.F) {
	s := wire.NewRelocationID().String()
	for _, seed := range []string{s, strings.ToUpper(s), strings.ReplaceAll(s, "-", ""), "00000000-0000-0000-0000-000000000000", "", "../owners", "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		id, err := wire.ParseRelocationID(text)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidID) {
				t.Fatalf("%q: untyped error %v", text, err)
			}
			return
		}
		if id == (wire.RelocationID{}) {
			t.Fatalf("%q parsed as the zero id", text)
		}
		if again, err := wire.ParseRelocationID(id.String()); err != nil || again != id {
			t.Fatalf("%q → %v → %v %v", text, id, again, err)
		}
	})
}
