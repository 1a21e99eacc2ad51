//go:build !unix

package baseline

// freshBuffer is size bytes from Go's heap where there is no mmap.
func freshBuffer(size int) ([]byte, func(), error) {
	return make([]byte, size), func() {}, nil
}
