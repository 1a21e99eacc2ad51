package wire_test

import (
	"errors"
	"fmt"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// An error says its code where it is declared; every boundary answers
// with what that code means to it.
func ExampleCodeOf() {
	errBusy := wire.Sentinel(pb.Code_CODE_CONFLICT, "shop: cart busy")
	err := fmt.Errorf("checkout cart c1: %w", errBusy)

	code := wire.CodeOf(err)
	fmt.Println(wire.CodeName(code), wire.GRPCCode(code), wire.HTTPStatus(code), errors.Is(err, errBusy))
	fmt.Println(wire.StatusError(err))
	// Output:
	// conflict Aborted 409 true
	// rpc error: code = Aborted desc = checkout cart c1: shop: cart busy
}
