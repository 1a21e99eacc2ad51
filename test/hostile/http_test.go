package hostile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
)

// Slow bodies: a hundred connections that send a POST's headers and stall
// in its body are closed by locationd at its read timeout, and its
// goroutines come back down. A POST that is not JSON is refused with 415.
func TestSlowBodiesClosed(t *testing.T) {
	c := cluster(t, 1, chaos.Config{MemberArgs: []string{"--http-read-header-timeout", "1s", "--http-read-timeout", "1s"}})
	api := c.Members()[0].HTTP
	g0 := metric(t, api, "go_goroutines")
	var conns []net.Conn
	for range 100 {
		conn, err := net.Dial("tcp", api)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/relocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"object\":")
		conns = append(conns, conn)
	}
	t.Logf("locationd goroutines: %.0f before, %.0f with 100 stalled bodies", g0, metric(t, api, "go_goroutines"))
	for i, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, conn) // until the server closes it
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d still open 10 s after it stalled", i)
		}
	}
	eventually(t, 10*time.Second, "goroutines back down", func() error {
		if g := metric(t, api, "go_goroutines"); g > g0+10 {
			return fmt.Errorf("%.0f goroutines, %.0f before", g, g0)
		}
		return nil
	})
	resp, err := hc.Post("http://"+api+"/v1/relocations", "text/plain", strings.NewReader(`{"object":"actor/counter/c1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 415 || e.Error.Code != "unsupported_media_type" {
		t.Fatalf("text/plain POST: %s %q, want 415 unsupported_media_type", resp.Status, e.Error.Code)
	}
}

// meshctl refuses what does not parse before it sends anything: an object
// name like ../owners (which a client following a redirect would have
// read as the owners list) and a --node that is no host:port are usage
// errors (exit 2, one line), at once.
func TestMeshctlUsageErrors(t *testing.T) {
	c := cluster(t, 1, chaos.Config{})
	meshctl := filepath.Join(binDir, "meshctl")
	for _, args := range [][]string{
		{"--locationd", "http://" + c.Members()[0].HTTP, "get", "../owners"},
		{"--node", "bad addr", "call", "actor/counter/c1", "get"},
		{"--locationd", "http://" + c.Members()[0].HTTP, "relocate", "actor/counter/c1", "--to", "../n1"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(meshctl, args...)
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("meshctl %v: %v, want exit status 2", args, err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("meshctl %v took %s: it waited on the network", args, took)
		}
		if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines != 0 || !strings.HasPrefix(stderr.String(), "meshctl: ") {
			t.Errorf("meshctl %v: stderr %q, want one line", args, stderr.String())
		}
	}
}
