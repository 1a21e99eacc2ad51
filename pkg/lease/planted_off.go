//go:build !failpoints

package lease

import "time"

// countFrom is when a confirmed keep-alive's TTL counts from: its send, so
// the local deadline is never later than etcd's expiry.
func countFrom(sent, _ time.Time) time.Time { return sent }
