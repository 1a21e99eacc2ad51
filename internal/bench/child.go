package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshloc/meshloc/internal/embedetcd"
	"github.com/meshloc/meshloc/internal/nodemain"
	"github.com/meshloc/meshloc/internal/procstat"
	"github.com/meshloc/meshloc/pkg/node"
)

// Child processes: a part whose figure is a process's own (a node's RSS, a
// kill -9, etcd's CPU) runs that process apart, as this same executable
// started again with ChildEnv naming what it is. meshctl and the package's
// tests call MaybeChild first thing, so the bench needs no other binary and
// no source tree.

// ChildEnv names what a re-executed bench process runs: "etcd" (an
// embedded etcd member, its embedetcd.Config as JSON in ChildConfigEnv) or
// "node" (a meshnode of the built-in types; its arguments are meshnode's
// flags).
const (
	ChildEnv       = "MESHLOC_BENCH_CHILD"
	ChildConfigEnv = "MESHLOC_BENCH_CHILD_CONFIG"
)

// childReady is the line an etcd child prints on stdout once it serves.
const childReady = "ready"

// MaybeChild runs this process as a bench child and exits, when ChildEnv
// says it is one; otherwise it returns at once.
func MaybeChild() {
	kind := os.Getenv(ChildEnv)
	if kind == "" {
		return
	}
	os.Exit(childMain(kind, os.Args[1:], os.Stdout, os.Stderr))
}

func childMain(kind string, args []string, stdout, stderr io.Writer) int {
	var err error
	switch kind {
	case "etcd":
		err = childEtcd(stdout)
	case "node":
		cfg := node.DefaultConfig()
		fs := flag.NewFlagSet("bench-node", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err = fs.Parse(args); err == nil {
			err = nodemain.Serve(cfg, stderr, nodemain.Builtin)
		}
	default:
		err = fmt.Errorf("no bench child %q", kind)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench child %s: %v\n", kind, err)
		return 1
	}
	return 0
}

// childEtcd serves an embedded etcd member until SIGTERM or SIGINT.
func childEtcd(stdout io.Writer) error {
	var cfg embedetcd.Config
	if err := json.Unmarshal([]byte(os.Getenv(ChildConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", ChildConfigEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s, err := embedetcd.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintln(stdout, childReady)
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.Err():
		return err
	}
}

// child is a running bench child process.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // Wait's, once exited is closed
	log    *strings.Builder
}

// startChild starts this executable again as a bench child of kind with
// args (and config, JSON in ChildConfigEnv, when not nil); its stderr is
// kept for the error of a child that failed. An etcd child is returned
// once it serves.
func startChild(ctx context.Context, kind string, config any, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+kind)
	if config != nil {
		js, err := json.Marshal(config)
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, ChildConfigEnv+"="+string(js))
	}
	c := &child{cmd: cmd, exited: make(chan struct{}), log: &strings.Builder{}}
	cmd.Stderr = &lockedWriter{w: c.log}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() { // ends when the child closes its stdout (it exits)
		sc := bufio.NewScanner(out)
		once := false
		for sc.Scan() {
			if !once && sc.Text() == childReady {
				once = true
				close(ready)
			}
		}
		c.err = cmd.Wait()
		close(c.exited)
	}()
	if kind != "etcd" {
		return c, nil
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-ready:
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("bench: the %s child exited: %v: %s", kind, c.err, c.stderr())
	case <-t.C:
	case <-ctx.Done():
	}
	c.kill()
	return nil, fmt.Errorf("bench: the %s child is not ready: %s", kind, c.stderr())
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) stderr() string {
	if lw, ok := c.cmd.Stderr.(*lockedWriter); ok {
		return lw.String()
	}
	return ""
}

// kill ends the child at once (SIGKILL: what a crash is) and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop asks the child to end (SIGTERM: a node drains first) and waits at
// most d for it, then kills it.
func (c *child) stop(d time.Duration) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited:
		return c.err
	case <-t.C:
		c.kill()
		return errors.New("bench: child did not stop in time: killed")
	}
}

// cpu is the child's user and system CPU time so far (Linux: /proc).
func (c *child) cpu() (time.Duration, error) { return procstat.CPU(c.pid()) }

// rss is the child's resident set in bytes now (Linux: /proc).
func (c *child) rss() (int64, error) { return procstat.RSS(c.pid()) }

// lockedWriter is a writer several goroutines may use, read with String.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
