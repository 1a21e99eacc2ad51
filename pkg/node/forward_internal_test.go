package node

import (
	"context"
	"testing"

	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// A forwarded request without a call is answered invalid, not run.
func TestServeForwardRefusesEmptyRequest(t *testing.T) {
	rep := (&Node{}).serveForward(context.Background(), &pb.ForwardRequest{Id: 7})
	if rep.GetCode() != pb.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("reply %v", rep)
	}
}
