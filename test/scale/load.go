package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// load is the model's checked load: each worker adds 1 to counters of its
// own, one call at a time, and keeps per counter what was acknowledged and
// what may have run (a call without an answer). A counter whose owner was
// killed comes back empty under a new object generation, and the next call
// says so (state_lost): its count starts again from there.
type load struct {
	c       *client.Client
	workers int
	per     int

	mu       sync.Mutex
	counters map[string]*tracked

	ok, failed, unknown, lostDeclared atomic.Int64
}

// tracked is what one counter should hold.
type tracked struct {
	acked, unknown int64 // since it was (re-)created
	lost           int   // how often a loss was declared
}

func newLoad(c *client.Client, workers, per int) *load {
	return &load{c: c, workers: workers, per: per, counters: map[string]*tracked{}}
}

func (l *load) name(w, k int) string { return fmt.Sprintf("actor/counter/load-%d-%d", w, k) }

// run adds until ctx ends.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Go(func() {
			// A steady load, not a flood: each caller adds every 20 ms
			// (32 callers: about 1,600 adds/s), so the drains and the
			// recovery, not the load, take the machine.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ctx.Err() == nil; i++ {
				l.add(ctx, l.name(w, i%l.per))
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
}

func (l *load) add(ctx context.Context, name string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := l.c.Call(cctx, name, "add", "1")
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.counters[name]
	if t == nil {
		t = &tracked{}
		l.counters[name] = t
	}
	var we *wire.Error
	switch {
	case err == nil:
		t.acked++
		l.ok.Add(1)
	case errors.As(err, &we) && we.Code == pb.Code_CODE_STATE_LOST:
		// Its owner died with it: it was re-created empty, and this
		// call did not run (the caller learns, never silently).
		*t = tracked{lost: t.lost + 1}
		l.lostDeclared.Add(1)
	case errors.As(err, &we) && !wire.Retryable(we.Code):
		l.failed.Add(1) // refused: it did not run
	default:
		t.unknown++ // no answer: it may have run
		l.unknown.Add(1)
	}
}

// check reads every counter and compares it with what was acknowledged:
// acked ≤ value ≤ acked + unknown. It returns the counters below (lost
// acknowledged adds) and above (an add that ran twice, or never asked).
func (l *load) check(ctx context.Context) (lost, duplicated int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, t := range l.counters {
		r, err := l.c.Call(ctx, name, "get")
		var we *wire.Error
		if errors.As(err, &we) && we.Code == pb.Code_CODE_STATE_LOST {
			if t.acked > 0 {
				lost++ // its loss was never declared to a writer, yet it is gone
			}
			continue
		}
		if err != nil {
			return lost, duplicated, fmt.Errorf("read %s: %w", name, err)
		}
		var got struct {
			Value *int64 `json:"value"`
		}
		if err := json.Unmarshal(r.Payload, &got); err != nil || got.Value == nil {
			return lost, duplicated, fmt.Errorf("read %s: %q", name, r.Payload)
		}
		v := *got.Value
		switch {
		case v < t.acked:
			lost++
		case v > t.acked+t.unknown:
			duplicated++
		}
	}
	return lost, duplicated, nil
}
