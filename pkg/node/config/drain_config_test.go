package config_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"os"

	"github.com/spf13/pflag"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/pkg/node/config"
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
		{[]string{"--drain-concurrency", "5000"}, nil, "--drain-concurrency"},
		{[]string{"--drain-timeout", "0s"}, nil, "--drain-timeout"},
		{nil, map[string]string{"MESHNODE_DRAIN_TIMEOUT": "-1s"}, "--drain-timeout"},
	} {
		cfg, valid := parseConfig(t, c.args, c.env, c.bad)
		if valid && len(c.args) > 0 && (cfg.DrainConcurrency != 16 || cfg.DrainTimeout != 2*time.Minute) {
			t.Errorf("%v: concurrency %d timeout %v", c.args, cfg.DrainConcurrency, cfg.DrainTimeout)
		}
	}
	if d := config.Default(); d.DrainConcurrency != 512 || d.DrainTimeout != time.Minute {
		t.Errorf("defaults: %d %v", d.DrainConcurrency, d.DrainTimeout)
	}
}

// parseConfig is meshnode's config from --name n1, args and the
// environment env (set for the test), as the binary reads them. Validate
// must refuse it with ErrInvalidConfig naming bad, or accept it when bad
// is "" (then valid: the test checks the values).
func parseConfig(t *testing.T, args []string, env map[string]string, bad string) (cfg config.Config, valid bool) {
	t.Helper()
	cfg, err := readConfig(t, args, env)
	switch {
	case bad == "" && err != nil:
		t.Errorf("%v %v: %v", args, env, err)
	case bad != "" && (!errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), bad)):
		t.Errorf("%v %v: %v, want ErrInvalidConfig naming %s", args, env, err, bad)
	}
	return cfg, bad == "" && err == nil
}

// readConfig is parseConfig's config and Validate's verdict.
func readConfig(t *testing.T, args []string, env map[string]string) (config.Config, error) {
	t.Helper()
	cfg := config.Default()
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
	if err := cliutil.ApplyEnv(pfs, config.EnvPrefix, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Validate()
}
