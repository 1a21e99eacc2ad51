//go:build failpoints

package recovery

import (
	"context"

	"github.com/meshloc/meshloc/internal/failpoint"
	"github.com/meshloc/meshloc/pkg/authority"
)

// recoverMany is the seam where a step's recoveries are written; with the
// planted bug recovery-batch-shared-compare every recovery of a batch but
// the first leaves its own record's compare out.
func (c *Controller) recoverMany(ctx context.Context, st *authority.Store, reqs []authority.RecoverRequest) ([]authority.WriteResult, []error) {
	if failpoint.Planted(failpoint.BugRecoveryBatchSharedCompare) {
		return st.RecoverManySharedCompare(ctx, reqs)
	}
	return st.RecoverMany(ctx, reqs)
}
