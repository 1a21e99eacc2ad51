package main

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The measurements, as internal/bench/peers_measure.go makes them of
// meshloc: keep the two alike.

// adder adds delta to a counter and returns its new value.
type adder func(object string, delta int64) (int64, error)

// latency makes n serial adds of 1 to object: the successful ones'
// latencies, and how many failed.
func latency(add adder, object string, n int) ([]time.Duration, int64) {
	out := make([]time.Duration, 0, n)
	var failed int64
	for range n {
		t0 := time.Now()
		if _, err := add(object, 1); err != nil {
			failed++
			continue
		}
		out = append(out, time.Since(t0))
	}
	return out, failed
}

// rate runs inflight callers for d, caller w adding 1 to counter w mod
// objects, one call after the other.
func rate(add adder, prefix string, objects, inflight int, d time.Duration) (ok, failed int64, el time.Duration) {
	var nok, nfail atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range inflight {
		name := prefix + strconv.Itoa(w%max(1, objects))
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := add(name, 1); err != nil {
					nfail.Add(1)
					continue
				}
				nok.Add(1)
			}
		})
	}
	wg.Wait()
	return nok.Load(), nfail.Load(), time.Since(start)
}

// activate adds 1 to each of count new counters, inflight calls at a time.
func activate(add adder, prefix string, count, inflight int) (time.Duration, int64) {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				if _, err := add(prefix+strconv.Itoa(i), 1); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), failed.Load()
}

// LoadResult is what a load saw: the calls that succeeded and failed, the
// adds each counter acknowledged, when failed calls ended (wall clock, for
// the bench to set beside the moment of its fault), and the longest call.
type LoadResult struct {
	OK              int64   `json:"ok"`
	Failed          int64   `json:"failed"`
	Acked           []int64 `json:"acked"`
	FirstFailUnixNs int64   `json:"first_fail_unix_ns,omitempty"`
	LastFailUnixNs  int64   `json:"last_fail_unix_ns,omitempty"`
	MaxCallNs       int64   `json:"max_call_ns"`
	// OldestCallUnixNs is when the oldest call in flight started (0: none).
	OldestCallUnixNs int64 `json:"oldest_call_unix_ns,omitempty"`
}

// loader is a running load: callers adding 1 to counters chosen at random.
type loader struct {
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	res   LoadResult
	acked []atomic.Int64
	// calling[w] is when caller w's call in flight started (0: none).
	calling []atomic.Int64
}

func startLoad(add adder, prefix string, objects, callers int) *loader {
	l := &loader{done: make(chan struct{}), acked: make([]atomic.Int64, objects), calling: make([]atomic.Int64, callers)}
	for w := range callers {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-l.done:
					return
				default:
				}
				i := rng.IntN(objects)
				t0 := time.Now()
				l.calling[w].Store(t0.UnixNano())
				_, err := add(prefix+strconv.Itoa(i), 1)
				end := time.Now()
				l.calling[w].Store(0)
				l.mu.Lock()
				l.res.MaxCallNs = max(l.res.MaxCallNs, int64(end.Sub(t0)))
				if err != nil {
					l.res.Failed++
					if l.res.FirstFailUnixNs == 0 {
						l.res.FirstFailUnixNs = end.UnixNano()
					}
					l.res.LastFailUnixNs = end.UnixNano()
				} else {
					l.res.OK++
				}
				l.mu.Unlock()
				if err == nil {
					l.acked[i].Add(1)
				}
			}
		})
	}
	return l
}

func (l *loader) status() LoadResult {
	l.mu.Lock()
	r := l.res
	l.mu.Unlock()
	for i := range l.calling {
		if t := l.calling[i].Load(); t != 0 && (r.OldestCallUnixNs == 0 || t < r.OldestCallUnixNs) {
			r.OldestCallUnixNs = t
		}
	}
	return r
}

func (l *loader) stop() LoadResult {
	close(l.done)
	l.wg.Wait()
	r := l.status()
	for i := range l.acked {
		r.Acked = append(r.Acked, l.acked[i].Load())
	}
	return r
}

// read adds 0 to each counter (its value), up to 5 tries each: -1 for one
// that never answered.
func read(add adder, prefix string, objects int) []int64 {
	out := make([]int64, objects)
	for i := range out {
		out[i] = -1
		for range 5 {
			if v, err := add(prefix+strconv.Itoa(i), 0); err == nil {
				out[i] = v
				break
			}
		}
	}
	return out
}
