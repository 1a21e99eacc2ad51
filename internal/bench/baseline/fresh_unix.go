//go:build unix

package baseline

import "syscall"

// freshBuffer is size bytes of anonymous memory mapped for the call: pages
// the process never Touched, faulted in by the first write (Go's heap could
// hand back pages Touched before). release unmaps them.
func freshBuffer(size int) ([]byte, func(), error) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = syscall.Munmap(b) }, nil
}
