package node_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/pkg/node"
	"github.com/spf13/pflag"
	"os"
)

func TestConfigDrain(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		bad  string
	}{
		{nil, nil, ""},
		{[]string{"--drain-concurrency", "16", "--drain-timeout", "2m"}, nil, ""},
		{[]string{"--drain-concurrency", "0"}, nil, "--drain-concurrency"},
		{[]string{"--drain-concurrency", "1000"}, nil, "--drain-concurrency"},
		{[]string{"--drain-timeout", "0s"}, nil, "--drain-timeout"},
		{nil, map[string]string{"MESHNODE_DRAIN_TIMEOUT": "-1s"}, "--drain-timeout"},
	} {
		cfg, err := parseConfig(t, c.args, c.env)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v %v: %v", c.args, c.env, err)
		case c.bad != "" && (!errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v %v: %v, want ErrInvalidConfig naming %s", c.args, c.env, err, c.bad)
		}
		if c.bad == "" && len(c.args) > 0 && (cfg.DrainConcurrency != 16 || cfg.DrainTimeout != 2*time.Minute) {
			t.Errorf("%v: concurrency %d timeout %v", c.args, cfg.DrainConcurrency, cfg.DrainTimeout)
		}
	}
	if d := node.DefaultConfig(); d.DrainConcurrency != 4 || d.DrainTimeout != time.Minute {
		t.Errorf("defaults: %d %v", d.DrainConcurrency, d.DrainTimeout)
	}
}

// parseConfig is meshnode's config from --name n1, args and the
// environment env (set for the test), as the binary reads them, and
// Validate's verdict.
func parseConfig(t *testing.T, args []string, env map[string]string) (node.Config, error) {
	t.Helper()
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	cfg.AddFlags(fs)
	pfs := pflag.NewFlagSet("meshnode", pflag.ContinueOnError)
	pfs.AddGoFlagSet(fs)
	if err := pfs.Parse(append([]string{"--name", "n1"}, args...)); err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	if err := cliutil.ApplyEnv(pfs, node.EnvPrefix, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Validate()
}
