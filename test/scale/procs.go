package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshloc/meshloc/internal/promscrape"
)

// proc is one process of the model: a locationd or a meshnode.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string // its output's file
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// start runs bin with args, its output in dir/name.log (appended: a node
// started again keeps writing the same file).
func start(dir, name, bin string, args ...string) (*proc, error) {
	path := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: path, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { // ends with the process
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// term sends SIGTERM and waits up to d for the exit.
func (p *proc) term(d time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		p.kill()
		return fmt.Errorf("%s still ran %s after SIGTERM: killed", p.name, d)
	}
}

// kill sends SIGKILL (a crash) and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// rss is the process's resident set in bytes.
func (p *proc) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// tail is the last lines of the process's output.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// lastLine is the last line of the process's output that contains s.
func (p *proc) lastLine(s string) string {
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	last := ""
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			last = sc.Text()
		}
	}
	return last
}

// freeAddr is a loopback address whose port is free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// metric is the sum of the samples of a Prometheus metric (any labels) on
// the /metrics page at addr.
func metric(ctx context.Context, addr, name string) (float64, error) {
	return promscrape.Sum(ctx, addr, name)
}

// waitUntil calls cond every 100 ms until it reports true, at most d.
func waitUntil(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
