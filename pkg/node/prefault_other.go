//go:build !linux

package node

// allocPayload is the target's payload buffer (relocation.TargetConfig's
// Alloc): here the copies fault its pages in.
func allocPayload(n int) []byte { return make([]byte, n) }
