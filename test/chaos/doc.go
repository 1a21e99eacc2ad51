// Package chaos is the CI tier of the verification suite: one short checked
// run per workload with its faults, over real processes (locationd with its
// embedded etcd, or three of them as a 3-member etcd cluster, and meshnodes
// behind TCP proxies), and the planted-bug self-test. The binaries are built
// once with -tags failpoints. Its tests are all it has (chaos_test.go).
package chaos
