//go:build !failpoints

package recovery

import (
	"context"

	"github.com/meshloc/meshloc/pkg/authority"
)

// recoverMany is the seam where a step's recoveries are written (a test
// build's faults_on.go plants a bug here).
func (c *Controller) recoverMany(ctx context.Context, st *authority.Store, reqs []authority.RecoverRequest) ([]authority.WriteResult, []error) {
	return st.RecoverMany(ctx, reqs)
}
