package wire_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// allCodes is every value the generated enum declares.
func allCodes() []pb.Code {
	var out []pb.Code
	for v := range pb.Code_name {
		out = append(out, pb.Code(v))
	}
	return out
}

// Every code has the short name derived from its enum name: logs, metrics and
// meshctl print it.
func TestCodeNames(t *testing.T) {
	seen := map[string]pb.Code{}
	for _, c := range allCodes() {
		if c == pb.Code_CODE_UNSPECIFIED {
			continue // never sent: a reply without a code is a bug
		}
		want := strings.ToLower(strings.TrimPrefix(c.String(), "CODE_"))
		if got := wire.CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
		if prev, dup := seen[wire.CodeName(c)]; dup {
			t.Errorf("%v and %v share the name %q", prev, c, wire.CodeName(c))
		}
		seen[wire.CodeName(c)] = c
	}
	if got := wire.CodeName(pb.Code(999)); got != "code_999" {
		t.Errorf("unknown code named %q", got)
	}
}

// The one table from call codes to gRPC status codes. A new enum value fails
// here until it is given a row.
func TestGRPCCode(t *testing.T) {
	want := map[pb.Code]codes.Code{
		pb.Code_CODE_UNSPECIFIED:          codes.Internal,
		pb.Code_CODE_OK:                   codes.OK,
		pb.Code_CODE_NOT_OWNER:            codes.FailedPrecondition,
		pb.Code_CODE_RELOCATING:           codes.Unavailable,
		pb.Code_CODE_STATE_LOST:           codes.DataLoss,
		pb.Code_CODE_INVALID_ARGUMENT:     codes.InvalidArgument,
		pb.Code_CODE_UNKNOWN_TYPE:         codes.InvalidArgument,
		pb.Code_CODE_UNKNOWN_METHOD:       codes.InvalidArgument,
		pb.Code_CODE_PAYLOAD_TOO_LARGE:    codes.ResourceExhausted,
		pb.Code_CODE_INVALID_OPERATION_ID: codes.InvalidArgument,
		pb.Code_CODE_OPERATION_EXPIRED:    codes.DeadlineExceeded,
		pb.Code_CODE_UNAVAILABLE:          codes.Unavailable,
		pb.Code_CODE_STALE_FENCE:          codes.FailedPrecondition,
		pb.Code_CODE_SHUTTING_DOWN:        codes.Unavailable,
		pb.Code_CODE_DATA_LOST:            codes.DataLoss,
		pb.Code_CODE_DEADLINE_EXCEEDED:    codes.DeadlineExceeded,
		pb.Code_CODE_INTERNAL:             codes.Internal,
		pb.Code_CODE_APPLICATION_ERROR:    codes.Aborted,
		pb.Code_CODE_UNKNOWN_KIND:         codes.InvalidArgument,
		pb.Code_CODE_PROTOCOL_ERROR:       codes.InvalidArgument,
		pb.Code_CODE_ALREADY_TERMINAL:     codes.FailedPrecondition,
		pb.Code_CODE_NOT_FOUND:            codes.NotFound,
		pb.Code_CODE_STATE_TOO_LARGE:      codes.ResourceExhausted,
		pb.Code_CODE_RESOURCE_EXHAUSTED:   codes.ResourceExhausted,
		pb.Code_CODE_PERMISSION_DENIED:    codes.PermissionDenied,
		pb.Code_CODE_CONFLICT:             codes.Aborted,
		pb.Code_CODE_ALREADY_EXISTS:       codes.AlreadyExists,
		pb.Code_CODE_CORRUPT_RECORD:       codes.DataLoss,
		pb.Code_CODE_DELETED:              codes.NotFound,
	}
	for _, c := range allCodes() {
		w, ok := want[c]
		if !ok {
			t.Errorf("%v has no row in this table: decide its gRPC code", c)
			continue
		}
		if got := wire.GRPCCode(c); got != w {
			t.Errorf("GRPCCode(%v) = %v, want %v", c, got, w)
		}
		if c != pb.Code_CODE_OK && wire.GRPCCode(c) == codes.OK {
			t.Errorf("error code %v travels as gRPC OK", c)
		}
	}
	if len(want) != len(pb.Code_name) {
		t.Errorf("table has %d rows, the enum %d values", len(want), len(pb.Code_name))
	}
	if got := wire.GRPCCode(pb.Code(999)); got != codes.Internal {
		t.Errorf("unknown code travels as %v, want Internal", got)
	}
}

// Retryable: the request was not executed (or a retry replays the same
// reply), so the same operation id may be sent again.
func TestRetryable(t *testing.T) {
	retryable := map[pb.Code]bool{
		pb.Code_CODE_NOT_OWNER:     true,
		pb.Code_CODE_RELOCATING:    true,
		pb.Code_CODE_UNAVAILABLE:   true,
		pb.Code_CODE_SHUTTING_DOWN: true,
		pb.Code_CODE_STALE_FENCE:   true,
	}
	for _, c := range allCodes() {
		if got := wire.Retryable(c); got != retryable[c] {
			t.Errorf("Retryable(%v) = %v, want %v", c, got, retryable[c])
		}
	}
}

func TestErrorMatchesByCode(t *testing.T) {
	err := wire.Errorf(pb.Code_CODE_NOT_OWNER, "%s is owned by %s", "actor/counter/c", "n2@7")
	if got, want := err.Error(), "not_owner: actor/counter/c is owned by n2@7"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("call: %w", err)
	if !errors.Is(wrapped, &wire.Error{Code: pb.Code_CODE_NOT_OWNER}) {
		t.Error("wrapped error does not match its code")
	}
	if errors.Is(wrapped, &wire.Error{Code: pb.Code_CODE_RELOCATING}) {
		t.Error("error matches another code")
	}
	var we *wire.Error
	if !errors.As(wrapped, &we) || we.Code != pb.Code_CODE_NOT_OWNER {
		t.Errorf("errors.As: %v", we)
	}
}

func TestValidateCall(t *testing.T) {
	op := wire.NewOperationID()
	v4 := [16]byte{0: 1, 6: 0x4f, 8: 0x80}
	args := func(n, size int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, size)
		}
		return out
	}
	const ok = pb.Code_CODE_OK
	cases := []struct {
		name string
		mut  func(r *pb.CallRequest)
		want pb.Code
	}{
		{"valid", func(*pb.CallRequest) {}, ok},
		{"no arguments", func(r *pb.CallRequest) { r.Args = nil }, ok},
		{"empty arguments", func(r *pb.CallRequest) { r.Args = args(3, 0) }, ok},

		{"version 0", func(r *pb.CallRequest) { r.Version = 0 }, pb.Code_CODE_PROTOCOL_ERROR},
		{"version 2", func(r *pb.CallRequest) { r.Version = wire.Version + 1 }, pb.Code_CODE_PROTOCOL_ERROR},
		{"version is checked first", func(r *pb.CallRequest) {
			r.Version, r.Object, r.OperationId = 9, "", nil
		}, pb.Code_CODE_PROTOCOL_ERROR},

		{"object empty", func(r *pb.CallRequest) { r.Object = "" }, pb.Code_CODE_INVALID_ARGUMENT},
		{"object at limit", func(r *pb.CallRequest) { r.Object = strings.Repeat("o", wire.MaxObjectLen) }, ok},
		{"object over limit", func(r *pb.CallRequest) { r.Object = strings.Repeat("o", wire.MaxObjectLen+1) }, pb.Code_CODE_INVALID_ARGUMENT},

		{"method empty", func(r *pb.CallRequest) { r.Method = "" }, pb.Code_CODE_INVALID_ARGUMENT},
		{"method at limit", func(r *pb.CallRequest) { r.Method = strings.Repeat("m", wire.MaxMethodLen) }, ok},
		{"method over limit", func(r *pb.CallRequest) { r.Method = strings.Repeat("m", wire.MaxMethodLen+1) }, pb.Code_CODE_INVALID_ARGUMENT},

		{"arguments at count limit", func(r *pb.CallRequest) { r.Args = args(wire.MaxArgs, 1) }, ok},
		{"arguments over count limit", func(r *pb.CallRequest) { r.Args = args(wire.MaxArgs+1, 0) }, pb.Code_CODE_PAYLOAD_TOO_LARGE},
		{"one argument at byte limit", func(r *pb.CallRequest) { r.Args = args(1, wire.MaxArgsBytes) }, ok},
		{"one argument over byte limit", func(r *pb.CallRequest) { r.Args = args(1, wire.MaxArgsBytes+1) }, pb.Code_CODE_PAYLOAD_TOO_LARGE},
		{"arguments summing to byte limit", func(r *pb.CallRequest) {
			r.Args = append(args(3, wire.MaxArgsBytes/4), make([]byte, wire.MaxArgsBytes-3*(wire.MaxArgsBytes/4)))
		}, ok},
		{"arguments summing over byte limit", func(r *pb.CallRequest) {
			r.Args = append(args(3, wire.MaxArgsBytes/4), make([]byte, wire.MaxArgsBytes-3*(wire.MaxArgsBytes/4)+1))
		}, pb.Code_CODE_PAYLOAD_TOO_LARGE},

		{"operation id missing", func(r *pb.CallRequest) { r.OperationId = nil }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"operation id short", func(r *pb.CallRequest) { r.OperationId = op[:15] }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"operation id long", func(r *pb.CallRequest) { r.OperationId = append(op[:], 0) }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"operation id zero", func(r *pb.CallRequest) { r.OperationId = make([]byte, 16) }, pb.Code_CODE_INVALID_OPERATION_ID},
		{"operation id not v7", func(r *pb.CallRequest) { r.OperationId = v4[:] }, pb.Code_CODE_INVALID_OPERATION_ID},

		{"hops at limit", func(r *pb.CallRequest) { r.Hops = wire.MaxHops }, ok},
		{"hops over limit", func(r *pb.CallRequest) { r.Hops = wire.MaxHops + 1 }, pb.Code_CODE_UNAVAILABLE},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &pb.CallRequest{
				Version: wire.Version, Object: "actor/counter/c", Method: "add",
				Args: [][]byte{[]byte("1")}, OperationId: op[:],
			}
			tc.mut(r)
			id, err := wire.ValidateCall(r)
			if tc.want == ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if id != op {
					t.Fatalf("operation id %v, want %v", id, op)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %v", tc.want)
			}
			if err.Code != tc.want {
				t.Fatalf("code %v (%v), want %v", err.Code, err, tc.want)
			}
			if !id.IsZero() {
				t.Errorf("refused request returned operation id %v", id)
			}
		})
	}
}
