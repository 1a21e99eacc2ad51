package lease

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: keepers,
// etcd clients, proxies and embedded etcd members are all closed by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
