package etcdalarm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdalarm"
	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A raised NOSPACE is seen by the next read (Run's, at once after a Kick,
// long before its interval), and so is its disarming; onChange hears both.
func TestMonitor(t *testing.T) {
	srv := etcdtest.Single(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	var mu sync.Mutex
	var seen [][]etcdalarm.Alarm
	changed := make(chan struct{}, 8)
	m := etcdalarm.New(cli, time.Hour, zerolog.Nop(), func(a []etcdalarm.Alarm) {
		mu.Lock()
		seen = append(seen, a)
		mu.Unlock()
		changed <- struct{}{}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	<-changed // the first read
	if m.NoSpace() || len(m.Alarms()) != 0 {
		t.Fatalf("alarms before any: %v", m.Alarms())
	}

	etcdtest.RaiseNoSpace(t, cli)
	m.Kick() // an interval of an hour: only the kick reads again
	<-changed
	if !m.NoSpace() || !etcdalarm.Has(m.Alarms(), "NOSPACE") {
		t.Fatalf("after NOSPACE was raised: %v", m.Alarms())
	}
	etcdtest.DisarmNoSpace(t, cli)
	if got, err := m.Read(ctx); err != nil || len(got) != 0 || m.NoSpace() {
		t.Fatalf("after the disarm: %v %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Errorf("onChange called %d times (%v), want 3: none, NOSPACE, none", len(seen), seen)
	}
}
