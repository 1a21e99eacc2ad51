// Package hostile attacks a real meshloc cluster the way a hostile process
// on the same network would, through nothing but its public ports and the
// project's own wire messages, and asserts the safe result every time:
// refused with a typed code, nothing changed in etcd, one owner per object.
// Its tests are all it has (main_test.go explains the cluster).
package hostile
