package meshnode

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/actor"
)

func run(args []string, env map[string]string, opts ...Option) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, opts...)
	return code, out.String(), errb.String()
}

// A program of its own is a meshnode by its name: --version, --help with
// its flags and their environment mirrors, usage errors; its types are
// registered after the command line was read (so they may use its flags),
// and a registration that fails stops it before it starts.
func TestProgramOfItsOwn(t *testing.T) {
	var ttl time.Duration
	opts := []Option{Named("cartnode"),
		Flags(func(fs *flag.FlagSet) { fs.DurationVar(&ttl, "cart-ttl", time.Minute, "a flag of the program") }),
		Register(func(*actor.Registry) error {
			if ttl != 2*time.Second {
				t.Errorf("registered with --cart-ttl %s, want the command line's 2s", ttl)
			}
			return errors.New("no carts today")
		}),
	}
	if code, out, _ := run([]string{"--version"}, nil, opts...); code != 0 || !strings.HasPrefix(out, "cartnode ") {
		t.Errorf("--version: %d %q", code, out)
	}
	if code, out, _ := run([]string{"--help"}, nil, opts...); code != 0 || !strings.Contains(out, "--cart-ttl") || !strings.Contains(out, "MESHNODE_CART_TTL") {
		t.Errorf("--help: %d:\n%s", code, out)
	}
	if code, _, errs := run([]string{"--name", "c1", "--cart-ttl", "soon"}, nil, opts...); code != 2 || !strings.HasPrefix(errs, "cartnode: usage: ") {
		t.Errorf("a bad flag of the program: %d %q", code, errs)
	}
	code, _, errs := run([]string{"--name", "c1", "--log-level", "disabled"}, map[string]string{"MESHNODE_CART_TTL": "2s"}, opts...)
	if code != 1 || !strings.Contains(errs, "cartnode: no carts today") {
		t.Errorf("a failed registration: %d %q", code, errs)
	}
}
