package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/demo"
	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func demoConfig(t *testing.T) demo.Config {
	cfg := demo.DefaultConfig()
	cfg.Locationd.DataDir = t.TempDir()
	cfg.Locationd.ListenClient = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Locationd.ListenPeer = fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Locationd.HTTP = fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	cfg.Nodes, cfg.NodeHTTP = nil, nil
	for range 3 {
		// Both ports picked: the default HTTP port (gRPC + 1) is not
		// reserved, and once collided with a port handed out here.
		cfg.Nodes = append(cfg.Nodes, fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)))
		cfg.NodeHTTP = append(cfg.NodeHTTP, fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)))
	}
	cfg.Duration = 3 * time.Second
	cfg.Every = time.Second
	cfg.Workers = 4
	cfg.Objects = 4
	cfg.LeaseTTL = 2 * time.Second
	return cfg
}

func runDemo(t *testing.T, cfg demo.Config) string {
	t.Helper()
	var out bytes.Buffer
	if err := demo.Run(context.Background(), cfg, &out, zerolog.Nop()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "calls/s") || !strings.Contains(out.String(), " 0 wrong replies, 0 final-state mismatches") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	return out.String()
}

var completedRe = regexp.MustCompile(`(?m)^relocations: (\d+) completed`)

// The demo runs while objects keep moving, checks every reply and every final
// state, and stops cleanly.
func TestDemoRuns(t *testing.T) {
	cfg := demoConfig(t)
	if !cfg.Relocate {
		t.Fatal("relocations are off by default")
	}
	out := runDemo(t, cfg)
	m := completedRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no relocation summary:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Fatalf("no relocation completed:\n%s", out)
	}
	if !strings.Contains(out, "relocs/s") || !strings.Contains(out, "interruption p50") {
		t.Fatalf("the progress lines do not show relocations:\n%s", out)
	}
}

// --relocations=false: nothing moves.
func TestDemoWithoutRelocations(t *testing.T) {
	cfg := demoConfig(t)
	cfg.Relocate = false
	out := runDemo(t, cfg)
	if !strings.Contains(out, "relocations: off") || strings.Contains(out, "relocs/s") {
		t.Fatalf("relocations off:\n%s", out)
	}
}
