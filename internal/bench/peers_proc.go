package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The Proto.Actor side of the peers section runs as processes of the
// program in bench/peers (a Go module of its own, so that meshloc's module
// does not depend on protoactor-go), built by the section with the go
// command: three members and a client member that the section drives
// with one JSON command a line (bench/peers/client.go).

// peersSource is where bench/peers is, relative to the repository's root.
const peersSource = "bench/peers"

// findPeers returns dir if set, else bench/peers in the nearest directory
// above the working directory that has it.
func findPeers(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, peersSource, "go.mod")); err == nil {
			return filepath.Join(d, peersSource), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("bench: the peers section builds %s of meshloc's source tree: not found above %s (run from the repository, or give --peers-dir)", peersSource, wd)
		}
	}
}

// buildPeers builds the peer program from dir into out.
func buildPeers(ctx context.Context, dir, out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("bench: the peers section builds %s with the go command: %w", dir, err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", out, ".")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: go build in %s: %w: %s", dir, err, b)
	}
	return nil
}

// startPeerProc starts the peer program with args; its stdout's lines
// come on lines (closed when it exits), its stderr is kept in the child's
// log.
func startPeerProc(exe string, args ...string) (*child, <-chan string, io.WriteCloser, error) {
	cmd := exec.Command(exe, args...)
	c := &child{cmd: cmd, exited: make(chan struct{}), log: &strings.Builder{}}
	cmd.Stderr = &lockedWriter{w: c.log}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	lines := make(chan string, 16)
	go func() { // ends when the process closes its stdout (it exits)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, lines, in, nil
}

// startPeerMember starts a member and waits for its "ready NAME ADDRESS"
// line: its address.
func startPeerMember(ctx context.Context, exe, endpoint, name string) (*child, string, error) {
	c, lines, _, err := startPeerProc(exe, "member", "--etcd", endpoint, "--name", name)
	if err != nil {
		return nil, "", err
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case l, ok := <-lines:
		if f := strings.Fields(l); ok && len(f) == 3 && f[0] == "ready" && f[1] == name {
			return c, f[2], nil
		}
		c.kill()
		return nil, "", fmt.Errorf("bench: Proto.Actor member %s said %q: %s", name, l, c.stderr())
	case <-t.C:
	case <-ctx.Done():
	}
	c.kill()
	return nil, "", fmt.Errorf("bench: Proto.Actor member %s not ready: %s", name, c.stderr())
}

// peerCommand and peerAnswer are the client's Command and Answer.
type peerCommand struct {
	Op       string `json:"op"`
	Members  int    `json:"members,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Objects  int    `json:"objects,omitempty"`
	N        int    `json:"n,omitempty"`
	Inflight int    `json:"inflight,omitempty"`
	Millis   int64  `json:"ms,omitempty"`
}

type peerAnswer struct {
	Error       string          `json:"error,omitempty"`
	LatenciesNs []int64         `json:"latencies_ns,omitempty"`
	OK          int64           `json:"ok,omitempty"`
	Failed      int64           `json:"failed,omitempty"`
	ElapsedNs   int64           `json:"elapsed_ns,omitempty"`
	Load        *loadResult     `json:"load,omitempty"`
	Values      []int64         `json:"values,omitempty"`
	Owners      []string        `json:"owners,omitempty"`
	Peer        *peerDescriptor `json:"peer,omitempty"`
}

// peerDescriptor says which Proto.Actor and how it is configured.
type peerDescriptor struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Go      string `json:"go"`
	Config  string `json:"config"`
}

// peerSide is Proto.Actor's side: its client member, one command at a
// time.
type peerSide struct {
	ctx   context.Context
	c     *child
	in    io.WriteCloser
	lines <-chan string
}

func startPeerClient(ctx context.Context, exe, endpoint string) (*peerSide, error) {
	c, lines, in, err := startPeerProc(exe, "client", "--etcd", endpoint)
	if err != nil {
		return nil, err
	}
	return &peerSide{ctx: ctx, c: c, in: in, lines: lines}, nil
}

// close ends the client: its stdin closes, then it is killed if it has not
// exited within 5 s.
func (p *peerSide) close() {
	p.in.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.c.exited:
	case <-t.C:
		p.c.kill()
	}
}

func (p *peerSide) do(cmd peerCommand) (peerAnswer, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return peerAnswer{}, err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return peerAnswer{}, fmt.Errorf("bench: Proto.Actor client: %w: %s", err, p.c.stderr())
	}
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			return peerAnswer{}, fmt.Errorf("bench: the Proto.Actor client exited: %s", p.c.stderr())
		}
		var a peerAnswer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			return peerAnswer{}, fmt.Errorf("bench: the Proto.Actor client answered %q: %w", l, err)
		}
		if a.Error != "" {
			return a, fmt.Errorf("bench: Proto.Actor client, %s: %s", cmd.Op, a.Error)
		}
		return a, nil
	case <-t.C:
		return peerAnswer{}, fmt.Errorf("bench: the Proto.Actor client did not answer %s in 10 min", cmd.Op)
	case <-p.ctx.Done():
		return peerAnswer{}, p.ctx.Err()
	}
}

// wait waits until the client sees n members.
func (p *peerSide) wait(n int) error {
	_, err := p.do(peerCommand{Op: "wait", Members: n})
	return err
}

func (p *peerSide) describe() (peerDescriptor, error) {
	a, err := p.do(peerCommand{Op: "version"})
	if err != nil || a.Peer == nil {
		return peerDescriptor{}, errors.Join(err, errors.New("bench: the Proto.Actor client did not describe itself"))
	}
	return *a.Peer, nil
}

func (p *peerSide) latency(prefix string, n int) ([]time.Duration, int64, error) {
	a, err := p.do(peerCommand{Op: "latency", Prefix: prefix, N: n})
	lat := make([]time.Duration, len(a.LatenciesNs))
	for i, d := range a.LatenciesNs {
		lat[i] = time.Duration(d)
	}
	return lat, a.Failed, err
}

func (p *peerSide) rate(prefix string, objects, inflight int, d time.Duration) (int64, int64, time.Duration, error) {
	a, err := p.do(peerCommand{Op: "rate", Prefix: prefix, Objects: objects, Inflight: inflight, Millis: d.Milliseconds()})
	return a.OK, a.Failed, time.Duration(a.ElapsedNs), err
}

func (p *peerSide) activate(prefix string, count, inflight int) (time.Duration, int64, error) {
	a, err := p.do(peerCommand{Op: "activate", Prefix: prefix, Objects: count, Inflight: inflight})
	return time.Duration(a.ElapsedNs), a.Failed, err
}

func (p *peerSide) loadStart(prefix string, objects, callers int) error {
	_, err := p.do(peerCommand{Op: "load_start", Prefix: prefix, Objects: objects, Inflight: callers})
	return err
}

func (p *peerSide) loadStatus() (loadResult, error) { return p.loadOp("load_status") }
func (p *peerSide) loadStop() (loadResult, error)   { return p.loadOp("load_stop") }

func (p *peerSide) loadOp(op string) (loadResult, error) {
	a, err := p.do(peerCommand{Op: op})
	if err == nil && a.Load == nil {
		err = fmt.Errorf("bench: Proto.Actor client, %s: no load in the answer", op)
	}
	if err != nil {
		return loadResult{}, err
	}
	return *a.Load, nil
}

// owners are the addresses of the members the counters live on
// (peersCluster.memberAt names them).
func (p *peerSide) owners(prefix string, objects int) ([]string, error) {
	a, err := p.do(peerCommand{Op: "owners", Prefix: prefix, Objects: objects})
	if err == nil && len(a.Owners) != objects {
		err = fmt.Errorf("bench: Proto.Actor client named %d owners of %d", len(a.Owners), objects)
	}
	return a.Owners, err
}

func (p *peerSide) read(prefix string, objects int) ([]int64, error) {
	a, err := p.do(peerCommand{Op: "read", Prefix: prefix, Objects: objects})
	if err == nil && len(a.Values) != objects {
		err = fmt.Errorf("bench: Proto.Actor client read %d values of %d", len(a.Values), objects)
	}
	return a.Values, err
}
