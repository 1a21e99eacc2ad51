//go:build !linux

package prefault

// Alloc is the target's payload buffer (relocation.TargetConfig's
// Alloc): here the copies fault its pages in.
func Alloc(n int) []byte { return make([]byte, n) }
