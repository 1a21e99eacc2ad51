package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// tail keeps the last bytes a process wrote, for error messages.
type tail struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func (t *tail) contains(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Contains(t.b, []byte(s))
}

// Process is one started binary: its output goes to a log file (appended to
// across restarts) and the last 64 KiB are kept in memory.
type Process struct {
	Name   string
	cmd    *exec.Cmd
	log    *os.File
	out    *tail
	exited chan struct{}
	err    error // Wait's result, valid once exited is closed
}

func startProcess(name, bin, logPath string, env []string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s %v (env %v)\n", time.Now().Format(time.RFC3339Nano), bin, args, env)
	p := &Process{Name: name, cmd: exec.Command(bin, args...), log: f, out: &tail{max: 64 << 10}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	w := io.MultiWriter(f, p.out)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), p.err)
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// Alive reports whether the process has not exited.
func (p *Process) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed once the process exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the exit status, once exited.
func (p *Process) Err() error {
	if p.Alive() {
		return nil
	}
	return p.err
}

// Output is the tail of what the process wrote.
func (p *Process) Output() string { return p.out.String() }

// Printed reports whether the process's recent output contains s.
func (p *Process) Printed(s string) bool { return p.out.contains(s) }

// Wait waits up to d for the exit and reports whether it happened.
func (p *Process) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// Signal sends sig (a no-op once exited).
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return errors.New("chaos: " + p.Name + " already exited")
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the exit. A stopped process (SIGSTOP) dies
// too.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGCONT (in case it is stopped) and SIGTERM and waits up to d,
// then SIGKILL. The error says it had to be killed.
func (p *Process) Stop(d time.Duration) error {
	if !p.Alive() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.Wait(d) {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT) // the Go runtime prints every goroutine
	p.Wait(3 * time.Second)
	p.Kill()
	return fmt.Errorf("chaos: %s still running %s after SIGTERM: killed (goroutines in its log)", p.Name, d)
}
