package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshloc/meshloc/pkg/node"
)

// precopy measures the interruption of a 64 MiB state that takes writes
// while it moves, with pre-copy (the node's default) and without
// (RelocateOptions.NoPrecopy), the two alternating in one run. One caller
// writes 64 bytes at a time, one write after the other, at random offsets
// of a 1 MiB hot part of the state (a working set: a state written all
// over at this rate changes every chunk during the pre-copy, and then
// pre-copy sends it twice).
func (x *run) precopy() error {
	// 64 MiB, or the plan's streaming size if smaller (a test's tiny plan).
	size := min(64<<20, x.cfg.Plan.Stream)
	hot := min(1<<20, size/4)
	moves := 2
	for _, s := range x.cfg.Plan.Sizes {
		if s.Bytes == size {
			moves = max(2, s.Moves/2)
		}
	}
	label := fmt.Sprintf("%d MiB", size>>20)
	x.step("pre-copy: %d relocations of a %s state taking writes (a %d KiB hot part), with and without pre-copy, alternating", 2*moves, label, hot>>10)
	name := "actor/blob/precopy"
	o, err := x.m.create(x.ctx, name, "fill", strconv.Itoa(size))
	if err != nil {
		return err
	}
	// A first move: a node learns a state's size when it moves it (one of
	// unknown size is not pre-copied).
	if _, err := x.m.move(x.ctx, o); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(x.ctx)
	var writes, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(3, 3))
		buf := make([]byte, 64)
		for ctx.Err() == nil {
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			_, err := x.m.direct.Call(ctx, name, "write", strconv.Itoa(r.IntN(hot-len(buf))), string(buf))
			switch {
			case err == nil:
				writes.Add(1)
			case ctx.Err() == nil:
				failed.Add(1)
			}
		}
	})
	var with, without []time.Duration
	var deltaBytes, fullBytes, notDone int64
	for i := range 2 * moves {
		pre := i%2 == 0
		st, err := x.m.move(x.ctx, o, node.RelocateOptions{NoPrecopy: !pre, Foreground: true}) // measured one at a time, while a caller writes
		if err != nil {
			notDone++
			continue
		}
		d, _, err := x.m.interruption(x.ctx, st, o.at)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		if pre {
			with = append(with, d)
			deltaBytes += int64(st.GetSealedBytes())
		} else {
			without = append(without, d)
			fullBytes += int64(st.GetSealedBytes())
		}
	}
	cancel()
	wg.Wait()
	if len(with) == 0 || len(without) == 0 {
		return fmt.Errorf("bench: pre-copy: %d relocations did not complete", notDone)
	}
	note := joinNote(fmt.Sprintf("%d writes during the moves", writes.Load()), failedNote(failed.Load()))
	if notDone > 0 {
		note = joinNote(note, fmt.Sprintf("%d moves did not complete", notDone))
	}
	x.base(Measure{Name: "interruption p50, " + label + ", writes, no pre-copy", Value: ms(pct(without, 50)), Unit: "ms", N: int64(len(without)),
		Note: fmt.Sprintf("%.1f MiB sent after the seal per move", float64(fullBytes)/float64(len(without))/(1<<20))})
	x.base(Measure{Name: "interruption p99, " + label + ", writes, no pre-copy", Value: ms(pct(without, 99)), Unit: "ms", N: int64(len(without))})
	x.fig(Measure{Name: "interruption p50, " + label + ", writes, pre-copy", Value: ms(pct(with, 50)), Unit: "ms", N: int64(len(with)),
		Note: joinNote(note, fmt.Sprintf("%.2f MiB sent after the seal per move", float64(deltaBytes)/float64(len(with))/(1<<20)))},
		"interruption p50, "+label+", writes, no pre-copy", nil)
	x.fig(Measure{Name: "interruption p99, " + label + ", writes, pre-copy", Value: ms(pct(with, 99)), Unit: "ms", N: int64(len(with))},
		"interruption p99, "+label+", writes, no pre-copy", nil)
	_, err = x.m.direct.Call(x.ctx, name, "fill", "0")
	return err
}
