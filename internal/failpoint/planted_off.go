//go:build !failpoints

package failpoint

// Planted is the constant false without the failpoints build tag: the
// compiler removes every planted branch.
func Planted(string) bool { return false }

// Plant does nothing without the failpoints build tag.
func Plant(...string) (undo func()) { return func() {} }
