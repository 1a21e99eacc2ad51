//go:build !failpoints

package failpoint

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Hit is a no-op without the failpoints build tag.
func Hit(string) error { return nil }

// Corrupt returns data unchanged without the failpoints build tag.
func Corrupt(_ string, data []byte) []byte { return data }

// Enable is a no-op without the failpoints build tag.
func Enable(string, string) error { return nil }

// Reset is a no-op without the failpoints build tag.
func Reset() {}
