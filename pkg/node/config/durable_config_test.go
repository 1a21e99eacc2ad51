package config_test

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"os"

	"github.com/spf13/pflag"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/pkg/node/config"
)

// --durable-max-bytes: a flag with an environment mirror, bounded.
func TestConfigDurableMaxBytes(t *testing.T) {
	for _, c := range []struct {
		flag string
		want int
		bad  bool
	}{
		{"", config.DefaultDurableMaxBytes, false},
		{"4096", 4096, false},
		{"4194304", 4 << 20, false},
		{"4095", 0, true},
		{"67108865", 0, true},
		{"-1", 0, true},
	} {
		cfg := config.Default()
		fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
		cfg.AddFlags(fs)
		args := []string{"--name", "n1"}
		if c.flag != "" {
			args = append(args, "--durable-max-bytes", c.flag)
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := cfg.Validate()
		switch {
		case c.bad && (!errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), "--durable-max-bytes")):
			t.Errorf("--durable-max-bytes %s: %v, want ErrInvalidConfig naming the flag", c.flag, err)
		case !c.bad && (err != nil || cfg.DurableMaxBytes != c.want):
			t.Errorf("--durable-max-bytes %s: %d, %v; want %d", c.flag, cfg.DurableMaxBytes, err, c.want)
		}
	}
	t.Setenv("MESHNODE_DURABLE_MAX_BYTES", "65536")
	cfg := config.Default()
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	cfg.AddFlags(fs)
	pfs := pflag.NewFlagSet("meshnode", pflag.ContinueOnError)
	pfs.AddGoFlagSet(fs)
	if err := pfs.Parse([]string{"--name", "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := cliutil.ApplyEnv(pfs, config.EnvPrefix, os.LookupEnv); err != nil || cfg.DurableMaxBytes != 65536 {
		t.Errorf("MESHNODE_DURABLE_MAX_BYTES=65536: %d %v", cfg.DurableMaxBytes, err)
	}
}
