package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

type etcdLike struct{ c codes.Code }

func (e etcdLike) Error() string    { return "etcdserver: " + e.c.String() }
func (e etcdLike) Code() codes.Code { return e.c }

// CodeOf finds a sentinel's code through wrapping, and classifies what
// carries none.
func TestCodeOf(t *testing.T) {
	errBusy := Sentinel(pb.Code_CODE_CONFLICT, "x: busy")
	for _, tc := range []struct {
		err  error
		want pb.Code
	}{
		{nil, pb.Code_CODE_OK},
		{errBusy, pb.Code_CODE_CONFLICT},
		{fmt.Errorf("relocate a: %w", errBusy), pb.Code_CODE_CONFLICT},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", Errorf(pb.Code_CODE_NOT_FOUND, "gone"))), pb.Code_CODE_NOT_FOUND},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), pb.Code_CODE_DEADLINE_EXCEEDED},
		{context.Canceled, pb.Code_CODE_UNAVAILABLE},
		{status.Error(codes.Unavailable, "node gone"), pb.Code_CODE_UNAVAILABLE},
		{fmt.Errorf("rpc: %w", status.Error(codes.FailedPrecondition, "not here")), pb.Code_CODE_NOT_OWNER},
		{etcdLike{codes.OutOfRange}, pb.Code_CODE_UNAVAILABLE},
		{errors.New("a bug"), pb.Code_CODE_INTERNAL},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tc.err, CodeName(got), CodeName(tc.want))
		}
	}
	if !errors.Is(fmt.Errorf("w: %w", errBusy), errBusy) || errors.Is(Sentinel(pb.Code_CODE_CONFLICT, "x: busy"), errBusy) {
		t.Error("a sentinel must compare by identity")
	}
}

// Every boundary derives from the same code: a gRPC status that round-trips,
// an HTTP status.
func TestBoundaries(t *testing.T) {
	for c := range pb.Code_name {
		code := pb.Code(c)
		if code == pb.Code_CODE_UNSPECIFIED || code == pb.Code_CODE_OK {
			continue
		}
		st := status.Convert(StatusError(Errorf(code, "m")))
		if st.Code() != GRPCCode(code) || st.Message() != CodeName(code)+": m" {
			t.Errorf("%s: status %v", CodeName(code), st)
		}
		if h := HTTPStatus(code); h < 200 || h > 599 {
			t.Errorf("%s: HTTP %d", CodeName(code), h)
		}
		if CodeName(code) == fmt.Sprintf("code_%d", c) {
			t.Errorf("code %d has no name", c)
		}
	}
	for code, want := range map[pb.Code]int{pb.Code_CODE_CONFLICT: http.StatusConflict, pb.Code_CODE_NOT_FOUND: http.StatusNotFound,
		pb.Code_CODE_INVALID_ARGUMENT: http.StatusBadRequest, pb.Code_CODE_UNAVAILABLE: http.StatusServiceUnavailable,
		pb.Code_CODE_PERMISSION_DENIED: http.StatusForbidden, pb.Code_CODE_INTERNAL: http.StatusInternalServerError} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", CodeName(code), got, want)
		}
	}
	if StatusError(nil) != nil {
		t.Error("StatusError(nil) != nil")
	}
}
