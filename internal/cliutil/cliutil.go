// Package cliutil holds the small helpers the meshloc binaries share for their
// command lines: the environment mirror of flags, the list flag value, the
// reload of certificates on SIGHUP, and --version.
//
// It is not a config framework: each binary owns one Config and only
// borrows these mechanics.
package cliutil

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// EnvName is the environment variable that mirrors flag name under prefix:
// EnvName("LOCATIOND_", "data-dir") is "LOCATIOND_DATA_DIR".
func EnvName(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line from
// its environment mirror (EnvName(prefix, flag)), when that variable is set.
// The order of precedence is therefore: flag, then environment, then default.
// lookup is os.LookupEnv in the binaries and a map in tests.
//
// A value the flag refuses is an error naming the variable, so that a typo in
// the environment fails the start instead of being ignored.
func ApplyEnv(fs *pflag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		env := EnvName(prefix, f.Name)
		v, ok := lookup(env)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("environment %s=%q: %w", env, v, e)
		}
	})
	return err
}

// List is a flag value holding a comma-separated list, e.g.
// --etcd-endpoints http://a:2379,http://b:2379. Setting it replaces the list
// (it does not append), so an environment value and a flag never mix. Empty
// elements are dropped: "" is the empty list.
type List struct{ p *[]string }

// NewList returns a List writing into p.
func NewList(p *[]string) *List { return &List{p: p} }

// String is the comma-joined list.
func (l *List) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

// Set replaces the list by the comma-separated elements of s.
func (l *List) Set(s string) error {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	*l.p = out
	return nil
}

// Type names the value in pflag's help.
func (l *List) Type() string { return "list" }

// ReloadOnHangup calls reload at every SIGHUP (a renewed TLS certificate)
// and logs what happened, until the returned stop is called (it waits for
// the goroutine).
func ReloadOnHangup(log zerolog.Logger, reload func() error) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-sigs:
				if err := reload(); err != nil {
					log.Error().Err(err).Msg("SIGHUP: certificate not reloaded (the one in use stays)")
				} else {
					log.Info().Msg("SIGHUP: certificate reloaded")
				}
			case <-done:
				return
			}
		}
	})
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
	}
}

// Revision is the VCS revision a build names when the toolchain did not
// stamp one (-buildvcs=false): make sets it with
// -ldflags "-X github.com/meshloc/meshloc/internal/cliutil.Revision=…".
var Revision string

// Version is what every binary answers to --version: the module version
// (v1.2.3, or (devel) for a build from a work tree), the VCS revision, its
// time, and whether the tree had changes, as the Go toolchain recorded
// them in the binary (or Revision), and the Go version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		rev = Revision
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	if at != "" {
		v += " " + at
	}
	return v + " " + bi.GoVersion
}

// SetVersion makes root answer --version with Version.
func SetVersion(root *cobra.Command) {
	root.Version = Version()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
}
