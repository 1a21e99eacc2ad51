package placement_test

import (
	"fmt"

	"github.com/meshloc/meshloc/pkg/placement"
)

// The one rule for where an object may go, and why not.
func ExampleIneligible() {
	need := placement.Need{Types: []string{"cart"}, Version: "v2", From: "n1"}
	for _, c := range []placement.Candidate{
		{ID: "n1", Serving: true, Weight: 1, Types: []string{"cart"}, Version: "v2"},
		{ID: "n2", Serving: true, Weight: 1, Types: []string{"counter"}, Version: "v2"},
		{ID: "n3", Serving: true, Weight: 1, Types: []string{"cart"}, Version: "v1"},
		{ID: "n4", Serving: true, Weight: 0, Types: []string{"cart"}, Version: "v2"},
		{ID: "n5", Serving: true, Weight: 2, Types: []string{"cart"}, Version: "v2"},
	} {
		if why := placement.Ineligible(c, need); why != "" {
			fmt.Println("no:", why)
		} else {
			fmt.Println("yes:", c.ID)
		}
	}
	// Output:
	// no: n1 is the owner it comes from
	// no: n2 does not host type cart
	// no: n3 runs application version "v1", not "v2"
	// no: n4 has weight 0 (a gateway)
	// yes: n5
}
