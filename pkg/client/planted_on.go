//go:build failpoints

package client

import "github.com/meshloc/meshloc/internal/failpoint"

// acceptOlderFence: in a test build the planted bug no-generation-check
// accepts a reply older than a fence already seen (keeping the newest).
func acceptOlderFence() bool { return failpoint.Planted(failpoint.BugNoGenerationCheck) }
