package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// proc is one running postmaster and the goroutine that waits for it.
type proc struct {
	pid  int
	done chan struct{} // closed when the postmaster has exited and been reaped
	err  error         // Wait's result, valid once done is closed
}

// startProc starts name from bin with args, as cred, in dir, writing to
// logPath. The goroutine that starts it is locked to its OS thread until
// the process is reaped: the kernel sends Pdeathsig when the *thread* that
// forked exits (go.dev/issue/27505), and a locked goroutine's thread lives
// as long as it stays locked.
func startProc(bin, name string, args []string, cred *syscall.Credential, dir, logPath string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	p := &proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// The server outlives Launch's context: Stop and Kill end it.
		cmd := command(context.Background(), bin, name, args, cred, dir, log)
		// SIGQUIT is an immediate shutdown: unlike SIGKILL it still removes
		// the server's System V shared memory segment.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
		err := cmd.Start()
		log.Close() // the child holds its own copy
		if err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, fmt.Errorf("pgserver: start %s: %w", name, err)
	}
	return p, nil
}

// command is name from bin as cred (nil: this process's user) with its
// output appended to log. The environment is this process's, with the
// messages' locale pinned so that the log reads the same everywhere.
func command(ctx context.Context, bin, name string, args []string, cred *syscall.Credential, dir string, log *os.File) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin+"/"+name, args...)
	cmd.Dir = dir // the server's user may not be able to enter our working directory
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// run runs name to completion (initdb), its output appended to logPath.
func run(ctx context.Context, bin, name string, args []string, cred *syscall.Credential, dir, logPath string) error {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer log.Close()
	if err := command(ctx, bin, name, args, cred, dir, log).Run(); err != nil {
		return fmt.Errorf("pgserver: %s: %w", name, err)
	}
	return nil
}

// stop asks for an immediate shutdown (SIGQUIT: no checkpoint, the backends
// quit at once, shared memory is removed) and waits for it; after grace it
// kills the postmaster.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGQUIT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// kill sends SIGKILL to the postmaster and waits for it. Its children
// (each in a session of its own: PostgreSQL calls setsid) notice the
// postmaster's death and exit by themselves.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the postmaster has been reaped; once it has, its
// pid may be another process's.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
