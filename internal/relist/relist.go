// Package relist runs a list-then-watch loop over etcd until its context
// ends: each round lists at one revision and follows a watch from the next;
// a watch cancelled by compaction re-lists at once, any other error re-lists
// after a backoff (50 ms doubling to 2 s, reset by compaction).
package relist

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Run calls round until ctx ends and returns nil then.
func Run(ctx context.Context, round func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			backoff = 50 * time.Millisecond
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		backoff = min(backoff*2, 2*time.Second)
	}
	return nil
}
