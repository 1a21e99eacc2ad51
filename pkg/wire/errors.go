package wire

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Errors and their codes: the one table, used by every boundary. A package
// declares each error it returns with the code a caller acts on
// (Sentinel); CodeOf finds that code through any wrapping; GRPCCode,
// HTTPStatus and StatusError turn it into what a gRPC service, an HTTP
// API or a command line answers. No boundary keeps a table of its own.

// coded is an error that carries its code.
type coded interface {
	error
	WireCode() pb.Code
}

// sentinel is a Sentinel error.
type sentinel struct {
	code pb.Code
	msg  string
}

func (e *sentinel) Error() string     { return e.msg }
func (e *sentinel) WireCode() pb.Code { return e.code }

// Sentinel returns a new error value with msg and code: compared with
// errors.Is like errors.New's, and CodeOf of any error that wraps it is
// code.
func Sentinel(code pb.Code, msg string) error { return &sentinel{code: code, msg: msg} }

// WireCode makes *Error a coded error.
func (e *Error) WireCode() pb.Code { return e.Code }

// CodeOf is the code of err: OK for nil; the code of the outermost coded
// error it wraps (Sentinel, *Error); DEADLINE_EXCEEDED for a context's
// deadline, UNAVAILABLE for a cancellation; for a gRPC status (an RPC's
// error, etcd's) the code its status code stands for; else INTERNAL: an
// error without a code is a bug of ours, not the caller's.
func CodeOf(err error) pb.Code {
	var c coded
	switch {
	case err == nil:
		return pb.Code_CODE_OK
	case errors.As(err, &c):
		return c.WireCode()
	case errors.Is(err, context.DeadlineExceeded):
		return pb.Code_CODE_DEADLINE_EXCEEDED
	case errors.Is(err, context.Canceled):
		return pb.Code_CODE_UNAVAILABLE
	}
	if st, ok := status.FromError(err); ok {
		return CodeOfGRPC(st.Code())
	}
	var ge interface{ GRPCStatus() *status.Status }
	if errors.As(err, &ge) {
		return CodeOfGRPC(ge.GRPCStatus().Code())
	}
	var ee interface{ Code() codes.Code } // etcd's errors (rpctypes.EtcdError)
	if errors.As(err, &ee) {
		return CodeOfGRPC(ee.Code())
	}
	return pb.Code_CODE_INTERNAL
}

// CodeOfGRPC is the code a gRPC status code stands for (the inverse of
// GRPCCode, where that is one-to-one).
func CodeOfGRPC(c codes.Code) pb.Code {
	switch c {
	case codes.OK:
		return pb.Code_CODE_OK
	case codes.InvalidArgument:
		return pb.Code_CODE_INVALID_ARGUMENT
	case codes.NotFound:
		return pb.Code_CODE_NOT_FOUND
	case codes.AlreadyExists:
		return pb.Code_CODE_ALREADY_EXISTS
	case codes.PermissionDenied, codes.Unauthenticated:
		return pb.Code_CODE_PERMISSION_DENIED
	case codes.ResourceExhausted:
		return pb.Code_CODE_RESOURCE_EXHAUSTED
	case codes.FailedPrecondition:
		return pb.Code_CODE_NOT_OWNER
	case codes.Aborted:
		return pb.Code_CODE_CONFLICT
	case codes.DeadlineExceeded:
		return pb.Code_CODE_DEADLINE_EXCEEDED
	case codes.DataLoss:
		return pb.Code_CODE_DATA_LOST
	case codes.Unavailable, codes.Canceled, codes.Unimplemented, codes.OutOfRange:
		// (Unimplemented: a peer that does not serve the service; OutOfRange:
		// etcd's compaction under a read, which a retry re-reads.)
		return pb.Code_CODE_UNAVAILABLE
	}
	return pb.Code_CODE_INTERNAL
}

// StatusError is err as a gRPC status error: the status code of its code,
// its message.
func StatusError(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(GRPCCode(CodeOf(err)), err.Error())
}

// HTTPStatus is the HTTP status of a code.
func HTTPStatus(c pb.Code) int {
	switch GRPCCode(c) {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted, codes.FailedPrecondition:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
