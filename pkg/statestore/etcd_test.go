package statestore_test

import (
	"testing"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/statestore/statestoretest"
)

// The etcd store passes the conformance suite.
func TestEtcdConformance(t *testing.T) {
	statestoretest.Run(t, func(t *testing.T, auth *authority.Store) statestore.Store {
		return statestore.NewEtcd(auth, 1<<20)
	})
}
