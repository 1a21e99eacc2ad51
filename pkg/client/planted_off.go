//go:build !failpoints

package client

// acceptOlderFence: a production build refuses a reply older than a fence
// already seen, always.
func acceptOlderFence() bool { return false }
