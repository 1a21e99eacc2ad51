//go:build failpoints

package lease

import (
	"time"

	"github.com/meshloc/meshloc/internal/failpoint"
)

// countFrom: in a test build the planted bug lease-receive-time counts the
// TTL from the reply's arrival, unsafe by the whole round trip.
func countFrom(sent, received time.Time) time.Time {
	if failpoint.Planted(failpoint.BugLeaseReceiveTime) {
		return received
	}
	return sent
}
