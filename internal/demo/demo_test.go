package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/demo"
	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo runs, checks every reply and every final state, and stops cleanly.
func TestDemoRuns(t *testing.T) {
	cfg := demo.DefaultConfig()
	cfg.Locationd.DataDir = t.TempDir()
	cfg.Locationd.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Locationd.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Locationd.HTTP = fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Nodes = nil
	for range 3 {
		cfg.Nodes = append(cfg.Nodes, fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)))
	}
	cfg.Duration = 3 * time.Second
	cfg.Every = time.Second
	cfg.Workers = 4
	cfg.Objects = 4
	cfg.LeaseTTL = 2 * time.Second
	var out bytes.Buffer
	if err := demo.Run(context.Background(), cfg, &out, zerolog.Nop()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "calls/s") || !strings.Contains(out.String(), "0 wrong replies, 0 final-state mismatches") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}
