// Package prefault allocates the large buffers a relocation target copies a
// payload into, with their pages mapped in by one system call where the
// kernel allows it (Linux 5.14's MADV_POPULATE_WRITE) instead of one fault
// per page during the copies.
package prefault
