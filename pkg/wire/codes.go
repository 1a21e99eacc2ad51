package wire

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Version is the wire version every request and stream carries.
const Version = 1

// Size limits. A request over a limit is refused with a typed error before
// anything is decoded further or executed.
const (
	// MaxArgsBytes bounds the sum of a call's argument bytes.
	MaxArgsBytes = 1 << 20
	// MaxArgs bounds the number of arguments.
	MaxArgs = 64
	// MaxMethodLen bounds a method name.
	MaxMethodLen = 128
	// MaxObjectLen bounds an object name.
	MaxObjectLen = 600
	// MaxMessageBytes is the gRPC message limit of the call service: the
	// arguments plus room for the envelope.
	MaxMessageBytes = MaxArgsBytes + 64<<10
	// MaxHops bounds forwards of one request between nodes.
	MaxHops = 4
	// MaxOwnerIDLen and MaxAddressLen bound a requester's owner id and
	// address (host:port).
	MaxOwnerIDLen = 128
	MaxAddressLen = 300
)

// Errors of the wire layer.
var (
	// ErrInvalidOperationID: an operation id is missing, zero, of the wrong length or not a UUIDv7.
	ErrInvalidOperationID = errors.New("wire: invalid operation id")
	// ErrInvalidID: a routing or relocation id is malformed.
	ErrInvalidID = errors.New("wire: invalid id")
	// ErrPayloadTooLarge: a request is over a size limit.
	ErrPayloadTooLarge = errors.New("wire: payload too large")
	// ErrInvalidArgument: a request field is malformed.
	ErrInvalidArgument = errors.New("wire: invalid argument")
	// ErrUnsupportedVersion: the peer speaks another wire version.
	ErrUnsupportedVersion = errors.New("wire: unsupported version")
)

// Error is a typed call error: the code a caller acts on, and a message.
type Error struct {
	Code    pb.Code
	Message string
	Hint    *pb.Location
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", CodeName(e.Code), e.Message) }

// Is matches another *Error with the same code, so errors.Is(err, &wire.Error{Code: c}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Errorf builds a typed error.
func Errorf(code pb.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeName is the short lower-case name of a code ("not_owner").
func CodeName(c pb.Code) string {
	n, ok := codeNames[c]
	if !ok {
		return fmt.Sprintf("code_%d", int32(c))
	}
	return n
}

var codeNames = map[pb.Code]string{
	pb.Code_CODE_OK: "ok", pb.Code_CODE_NOT_OWNER: "not_owner", pb.Code_CODE_RELOCATING: "relocating",
	pb.Code_CODE_STATE_LOST: "state_lost", pb.Code_CODE_INVALID_ARGUMENT: "invalid_argument",
	pb.Code_CODE_UNKNOWN_TYPE: "unknown_type", pb.Code_CODE_UNKNOWN_METHOD: "unknown_method",
	pb.Code_CODE_PAYLOAD_TOO_LARGE: "payload_too_large", pb.Code_CODE_INVALID_OPERATION_ID: "invalid_operation_id",
	pb.Code_CODE_OPERATION_EXPIRED: "operation_expired", pb.Code_CODE_UNAVAILABLE: "unavailable",
	pb.Code_CODE_STALE_FENCE: "stale_fence", pb.Code_CODE_SHUTTING_DOWN: "shutting_down",
	pb.Code_CODE_DATA_LOST: "data_lost", pb.Code_CODE_DEADLINE_EXCEEDED: "deadline_exceeded",
	pb.Code_CODE_INTERNAL: "internal", pb.Code_CODE_APPLICATION_ERROR: "application_error",
	pb.Code_CODE_UNKNOWN_KIND: "unknown_kind", pb.Code_CODE_PROTOCOL_ERROR: "protocol_error",
	pb.Code_CODE_ALREADY_TERMINAL: "already_terminal", pb.Code_CODE_NOT_FOUND: "not_found",
	pb.Code_CODE_STATE_TOO_LARGE: "state_too_large", pb.Code_CODE_RESOURCE_EXHAUSTED: "resource_exhausted",
	pb.Code_CODE_PERMISSION_DENIED: "permission_denied", pb.Code_CODE_CONFLICT: "conflict",
	pb.Code_CODE_ALREADY_EXISTS: "already_exists", pb.Code_CODE_CORRUPT_RECORD: "corrupt_record",
	pb.Code_CODE_DELETED: "deleted",
}

// GRPCCode maps a call code to the gRPC status code used when a call error
// must travel as a gRPC status (one table for the whole system).
func GRPCCode(c pb.Code) codes.Code {
	switch c {
	case pb.Code_CODE_OK:
		return codes.OK
	case pb.Code_CODE_INVALID_ARGUMENT, pb.Code_CODE_UNKNOWN_TYPE, pb.Code_CODE_UNKNOWN_METHOD,
		pb.Code_CODE_INVALID_OPERATION_ID, pb.Code_CODE_UNKNOWN_KIND:
		return codes.InvalidArgument
	case pb.Code_CODE_PAYLOAD_TOO_LARGE, pb.Code_CODE_STATE_TOO_LARGE, pb.Code_CODE_RESOURCE_EXHAUSTED:
		return codes.ResourceExhausted
	case pb.Code_CODE_NOT_OWNER, pb.Code_CODE_STALE_FENCE, pb.Code_CODE_ALREADY_TERMINAL:
		return codes.FailedPrecondition
	case pb.Code_CODE_RELOCATING, pb.Code_CODE_UNAVAILABLE, pb.Code_CODE_SHUTTING_DOWN:
		return codes.Unavailable
	case pb.Code_CODE_STATE_LOST, pb.Code_CODE_DATA_LOST, pb.Code_CODE_CORRUPT_RECORD:
		return codes.DataLoss
	case pb.Code_CODE_OPERATION_EXPIRED, pb.Code_CODE_DEADLINE_EXCEEDED:
		return codes.DeadlineExceeded
	case pb.Code_CODE_APPLICATION_ERROR:
		return codes.Aborted
	case pb.Code_CODE_NOT_FOUND, pb.Code_CODE_DELETED:
		return codes.NotFound
	case pb.Code_CODE_PERMISSION_DENIED:
		return codes.PermissionDenied
	case pb.Code_CODE_PROTOCOL_ERROR:
		return codes.InvalidArgument
	case pb.Code_CODE_CONFLICT:
		return codes.Aborted
	case pb.Code_CODE_ALREADY_EXISTS:
		return codes.AlreadyExists
	}
	return codes.Internal
}

// RetryReply reports whether a caller retries the call after reply r: its
// code is Retryable, or the node refused to take the object and another
// node may (r.Elsewhere: a node at its memory limits).
func RetryReply(r *pb.CallReply) bool { return Retryable(r.GetCode()) || r.GetElsewhere() }

// Retryable reports whether a caller may retry the same operation id after
// this code (the request was not executed, or retrying returns the same reply).
func Retryable(c pb.Code) bool {
	switch c {
	case pb.Code_CODE_NOT_OWNER, pb.Code_CODE_RELOCATING, pb.Code_CODE_UNAVAILABLE,
		pb.Code_CODE_SHUTTING_DOWN, pb.Code_CODE_STALE_FENCE:
		return true
	}
	return false
}

// ValidateCall checks a call request's envelope: version, sizes, operation id,
// method. The object name and type are checked by the node against its registry.
func ValidateCall(r *pb.CallRequest) (OperationID, *Error) {
	if r.GetVersion() != Version {
		return OperationID{}, Errorf(pb.Code_CODE_PROTOCOL_ERROR, "%v: got %d, want %d", ErrUnsupportedVersion, r.GetVersion(), Version)
	}
	if len(r.GetObject()) == 0 || len(r.GetObject()) > MaxObjectLen {
		return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: object name of %d bytes", ErrInvalidArgument, len(r.GetObject()))
	}
	if len(r.GetMethod()) == 0 || len(r.GetMethod()) > MaxMethodLen {
		return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: method name of %d bytes", ErrInvalidArgument, len(r.GetMethod()))
	}
	if len(r.GetArgs()) > MaxArgs {
		return OperationID{}, Errorf(pb.Code_CODE_PAYLOAD_TOO_LARGE, "%v: %d arguments, limit %d", ErrPayloadTooLarge, len(r.GetArgs()), MaxArgs)
	}
	n := 0
	for _, a := range r.GetArgs() {
		n += len(a)
	}
	if n > MaxArgsBytes {
		return OperationID{}, Errorf(pb.Code_CODE_PAYLOAD_TOO_LARGE, "%v: %d argument bytes, limit %d", ErrPayloadTooLarge, n, MaxArgsBytes)
	}
	id, err := ParseOperationIDBytes(r.GetOperationId())
	if err != nil {
		return OperationID{}, Errorf(pb.Code_CODE_INVALID_OPERATION_ID, "%v", err)
	}
	if r.GetHops() > MaxHops {
		return OperationID{}, Errorf(pb.Code_CODE_UNAVAILABLE, "request forwarded %d times, limit %d", r.GetHops(), MaxHops)
	}
	if g := r.GetKnownObjectGeneration(); g < 0 {
		return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: known object generation %d is negative", ErrInvalidArgument, g)
	}
	if rq := r.GetRequester(); rq != nil {
		switch {
		case rq.GetOwnerGeneration() < 0:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: requester owner generation %d is negative", ErrInvalidArgument, rq.GetOwnerGeneration())
		case len(rq.GetRoutingId()) != 0 && len(rq.GetRoutingId()) != IDLen:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: requester routing id of %d bytes", ErrInvalidArgument, len(rq.GetRoutingId()))
		case len(rq.GetOwnerId()) > MaxOwnerIDLen || len(rq.GetAddress()) > MaxAddressLen:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: requester owner id or address too long", ErrInvalidArgument)
		}
	}
	if ms := r.GetSender(); ms != nil {
		f := ms.GetFence()
		switch {
		case len(ms.GetObject()) == 0 || len(ms.GetObject()) > MaxObjectLen:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: message sender name of %d bytes", ErrInvalidArgument, len(ms.GetObject()))
		case f == nil:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: message sender without a fence", ErrInvalidArgument)
		case len(f.GetOwnerId()) > MaxOwnerIDLen || len(f.GetRoutingId()) > IDLen:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: message sender fence: owner id or routing id too long", ErrInvalidArgument)
		case f.GetOwnerGeneration() < 0 || f.GetObjectGeneration() < 0 || f.GetAuthorityGeneration() < 0 || f.GetStoreVersion() < 0:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: message sender fence with a negative generation", ErrInvalidArgument)
		case r.GetSession() != nil:
			return OperationID{}, Errorf(pb.Code_CODE_INVALID_ARGUMENT, "%v: a message is not a session call", ErrInvalidArgument)
		}
	}
	return id, nil
}
