package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/client"
)

// The measurements of the peers section, made alike of each side: of
// meshloc here, of Proto.Actor by the peer's client member
// (bench/peers/measure.go: the same code, keep the two alike).

// side is one cluster of the peers section, as its caller sees it.
type side interface {
	// latency makes n serial adds of 1 to counter prefix+"0".
	latency(prefix string, n int) (lat []time.Duration, failed int64, err error)
	// rate runs inflight callers for d, caller w adding 1 to counter
	// prefix+(w mod objects), one call after the other.
	rate(prefix string, objects, inflight int, d time.Duration) (ok, failed int64, el time.Duration, err error)
	// activate adds 1 to each of count new counters, inflight at a time.
	activate(prefix string, count, inflight int) (el time.Duration, failed int64, err error)
	// loadStart starts callers adding 1 to counters chosen at random among
	// objects; loadStatus says how it goes; loadStop ends it.
	loadStart(prefix string, objects, callers int) error
	loadStatus() (loadResult, error)
	loadStop() (loadResult, error)
	// read adds 0 to each counter: their values (-1: no answer in 5 tries).
	read(prefix string, objects int) ([]int64, error)
	// owners names the member each counter lives on.
	owners(prefix string, objects int) ([]string, error)
}

// loadResult is what a load saw (the peer's LoadResult, same JSON).
type loadResult struct {
	OK              int64   `json:"ok"`
	Failed          int64   `json:"failed"`
	Acked           []int64 `json:"acked"`
	FirstFailUnixNs int64   `json:"first_fail_unix_ns,omitempty"`
	LastFailUnixNs  int64   `json:"last_fail_unix_ns,omitempty"`
	MaxCallNs       int64   `json:"max_call_ns"`
	// OldestCallUnixNs is when the oldest call in flight started (0: none).
	OldestCallUnixNs int64 `json:"oldest_call_unix_ns,omitempty"`
}

// adder adds delta to a counter and returns its new value.
type adder func(object string, delta int64) (int64, error)

// meshSide is meshloc's side: counters actor/counter/<prefix><i> called
// through c (direct from etcd, or through the gateway).
type meshSide struct {
	add  adder
	call func(object string, delta int64) (*client.Reply, error)
	load *loader
}

func newMeshSide(ctx context.Context, c *client.Client) *meshSide {
	call := func(object string, delta int64) (*client.Reply, error) {
		return c.Call(ctx, "actor/counter/"+object, "add", strconv.FormatInt(delta, 10))
	}
	return &meshSide{call: call, add: func(object string, delta int64) (int64, error) {
		r, err := call(object, delta)
		if err != nil {
			return 0, err
		}
		return counterValue(r.Payload)
	}}
}

// owners asks each counter (an add of 0) and names the node that answered.
func (s *meshSide) owners(prefix string, objects int) ([]string, error) {
	out := make([]string, objects)
	for i := range out {
		r, err := s.call(prefix+strconv.Itoa(i), 0)
		if err != nil {
			return nil, err
		}
		out[i] = r.Node
	}
	return out, nil
}

// counterValue reads the counter's {"value":v}.
func counterValue(p []byte) (int64, error) {
	v, ok := bytes.CutPrefix(p, []byte(`{"value":`))
	if v, ok2 := bytes.CutSuffix(v, []byte("}")); ok && ok2 {
		return strconv.ParseInt(string(v), 10, 64)
	}
	return 0, fmt.Errorf("bench: a counter answered %q", p)
}

func (s *meshSide) latency(prefix string, n int) ([]time.Duration, int64, error) {
	lat, failed := measureLatency(s.add, prefix+"0", n)
	return lat, failed, nil
}

func (s *meshSide) rate(prefix string, objects, inflight int, d time.Duration) (int64, int64, time.Duration, error) {
	ok, failed, el := measureRate(s.add, prefix, objects, inflight, d)
	return ok, failed, el, nil
}

func (s *meshSide) activate(prefix string, count, inflight int) (time.Duration, int64, error) {
	el, failed := measureActivate(s.add, prefix, count, inflight)
	return el, failed, nil
}

func (s *meshSide) loadStart(prefix string, objects, callers int) error {
	if s.load != nil {
		return fmt.Errorf("bench: a load runs already")
	}
	s.load = startLoad(s.add, prefix, objects, callers)
	return nil
}

func (s *meshSide) loadStatus() (loadResult, error) {
	if s.load == nil {
		return loadResult{}, fmt.Errorf("bench: no load runs")
	}
	return s.load.status(), nil
}

func (s *meshSide) loadStop() (loadResult, error) {
	if s.load == nil {
		return loadResult{}, fmt.Errorf("bench: no load runs")
	}
	r := s.load.stop()
	s.load = nil
	return r, nil
}

func (s *meshSide) read(prefix string, objects int) ([]int64, error) {
	return measureRead(s.add, prefix, objects), nil
}

func measureLatency(add adder, object string, n int) ([]time.Duration, int64) {
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

func measureRate(add adder, prefix string, objects, inflight int, d time.Duration) (ok, failed int64, el time.Duration) {
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

func measureActivate(add adder, prefix string, count, inflight int) (time.Duration, int64) {
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

// loader is a running load: callers adding 1 to counters chosen at random.
type loader struct {
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	res   loadResult
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

func (l *loader) status() loadResult {
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

func (l *loader) stop() loadResult {
	close(l.done)
	l.wg.Wait()
	r := l.status()
	for i := range l.acked {
		r.Acked = append(r.Acked, l.acked[i].Load())
	}
	return r
}

func measureRead(add adder, prefix string, objects int) []int64 {
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
