package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/pkg/client"
)

// binaries are the commands the tests run as processes; they are built once
// per run of the test binary, into binDir.
var binaries = []string{"locationd", "meshnode", "meshctl"}

var (
	binDir    string // a temporary directory made by TestMain
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshloc-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// moduleRoot is the directory of the go.mod this test belongs to.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := findModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func findModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// binary returns the path of ./cmd/<name>, building every command of
// binaries (in one go build) the first time any of them is asked for.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := findModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		for _, b := range binaries {
			args = append(args, "./cmd/"+b)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	bin := filepath.Join(binDir, name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("binary %s: %v (add it to binaries)", name, err)
	}
	return bin
}

// syncBuffer collects a process's output for the failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a started binary. Its output (stdout and stderr) is kept and
// logged when the test fails; it is stopped (SIGTERM, then SIGKILL after a
// bound) when the test ends.
type process struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, valid once exited is closed
}

// stopTimeout bounds how long stop waits after SIGTERM before SIGKILL.
const stopTimeout = 20 * time.Second

func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if err := p.stop(stopTimeout); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		if t.Failed() {
			t.Logf("output of %s (%s):\n%s", p.name, p.cmd.ProcessState, p.out)
		}
	})
	return p
}

// alive reports whether the process has not exited.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// wait waits up to d for the process to exit and reports whether it did
// (its exit error is then p.err).
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop sends SIGTERM and waits up to d; then SIGKILL. It is a no-op for a
// process that already exited. The error says it had to be killed.
func (p *process) stop(d time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.wait(d) {
		return nil
	}
	p.kill()
	return fmt.Errorf("still running %s after SIGTERM: killed", d)
}

func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t)) }

// httpClient is an HTTP client whose idle connections are closed when the
// test ends (so that no connection goroutine outlives it).
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// startLocationd starts locationd with its embedded etcd on free ports and
// waits until /readyz answers. It returns the process, etcd's client URL and
// an API client.
//
// The free ports it picks can be taken by another process before locationd
// binds them (other packages' tests run at the same time): a start that
// exits with "address already in use" is retried with new ports.
func startLocationd(t *testing.T) (*process, string, *client.Admin) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		clientURL := "http://" + freeAddr(t)
		httpAddr := freeAddr(t)
		p := startProcess(t, "locationd", binary(t, "locationd"),
			"--data-dir", filepath.Join(t.TempDir(), "locationd"),
			"--listen-client", clientURL,
			"--listen-peer", "http://"+freeAddr(t),
			"--http", httpAddr,
		)
		cl, err := client.NewAdmin("http://"+httpAddr, httpClient(t))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = cl.Ready(ctx)
			cancel()
			if err == nil {
				return p, clientURL, cl
			}
			if !p.alive() || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if attempt < 5 && !p.alive() && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		t.Fatalf("locationd ready: %v (exited: %v)\n%s", err, !p.alive(), p.out.String())
	}
}

// waitFor polls cond every 50 ms until it returns nil, failing the test on
// timeout or when one of procs exits first.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) error, procs ...*process) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		for _, p := range procs {
			if !p.alive() {
				t.Fatalf("%s: %s exited (%v) while waiting: %v", what, p.name, p.err, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
