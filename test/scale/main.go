// Command scale is meshloc's scale model (make scale; not in CI): a
// million objects over eight meshnode processes on one machine, against
// locationd's embedded etcd; a rolling restart of every node under a
// checked load, then a kill -9 of one. It prints the figures of each step
// beside an etcd CAS rate measured on the same etcd, and checks at the end
// that nothing acknowledged was lost and nothing ran twice (the load's
// counters, and the nodes' execution logs). Exit status 0 only when every
// check held.
//
//	make scale                       # builds the binaries, then runs this
//	go run ./test/scale -bin build/scale -objects 100000   # a smaller model
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.bin, "bin", "build/scale", "directory holding the locationd and meshnode binaries")
	flag.StringVar(&cfg.dir, "dir", "", "work directory: data, logs, execution logs (default: a new temporary one)")
	flag.IntVar(&cfg.objects, "objects", 1_000_000, "idle counters spread over the nodes")
	flag.IntVar(&cfg.nodes, "nodes", 8, "meshnode processes")
	flag.IntVar(&cfg.workers, "workers", 32, "callers of the checked load")
	flag.IntVar(&cfg.per, "per-worker", 32, "counters of each caller")
	flag.Parse()
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "meshloc-scale-")
		if err != nil {
			fail(err)
		}
		cfg.dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := &model{cfg: cfg}
	err := m.run(ctx)
	m.close()
	if err != nil {
		fail(err)
	}
	fmt.Println("scale model: every check held")
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "scale model: %v\n", err)
	os.Exit(1)
}

type config struct {
	bin, dir                     string
	objects, nodes, workers, per int
}

func (c config) binary(name string) string { return filepath.Join(c.bin, name) }

// say prints one line of the model's report, with the time since start.
func (m *model) say(format string, a ...any) {
	fmt.Printf("[%7.1fs] %s\n", time.Since(m.t0).Seconds(), fmt.Sprintf(format, a...))
}
