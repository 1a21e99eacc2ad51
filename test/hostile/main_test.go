// Package hostile_test attacks a real meshloc cluster the way a hostile
// process on the same network would, with nothing but the public HTTP API,
// etcd-free reads of what it publishes, and the project's own wire messages
// (pkg/wire, pkg/record, pkg/relocation): forged relocations, huge
// announcements, endless stages, out-of-order frames, malformed admin RPCs
// and calls, slow HTTP bodies. Every test asserts the safe result: refused
// with a typed code, nothing changed in etcd, one owner per object, memory
// and goroutines back to where they were.
//
// The cluster is real: locationd with its embedded etcd and meshnode
// processes (internal/chaos), talking real gRPC. The test itself reads
// etcd only to check the result (and, once, to write a record behind a
// node's back, as an operator or a bug could).
package hostile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/pkg/mtls"
)

var binDir string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "meshloc-hostile-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
			return 1
		}
		build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/locationd", "./cmd/meshnode", "./cmd/meshctl")
		build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			return 1
		}
		binDir = dir
		code := m.Run()
		if code == 0 {
			// Keep-alive connections of the default client idle in its
			// pool (locationd's API, asked through it) are not leaks.
			http.DefaultClient.CloseIdleConnections()
			if err := goleak.Find(); err != nil {
				fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
				return 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// cluster starts locationd (embedded etcd) and n meshnodes n1..nN with extra
// node flags; it stops them when the test ends, keeping the work directory
// (process logs) if the test failed.
func cluster(t *testing.T, nodes int, cfg chaos.Config) *chaos.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "meshloc-hostile-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	cfg.BinDir, cfg.WorkDir, cfg.Nodes, cfg.Logf = binDir, dir, nodes, t.Logf
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := chaos.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("cluster close: %v", err)
		}
		if t.Failed() {
			t.Logf("work directory kept: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return c
}

// ---------------------------------------------------------------- the public API

var hc = &http.Client{Timeout: 10 * time.Second}

// apiClient is the HTTP client of the API: on a secured cluster, with the
// certificate of role (admin, operator, viewer).
func apiClient(t *testing.T, c *chaos.Cluster, role string) *http.Client {
	t.Helper()
	if !c.Secured() {
		return hc
	}
	r, err := mtls.Load(c.Files(role))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: r.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// getJSON GETs locationd's API at path into out (as admin).
func getJSON(t *testing.T, c *chaos.Cluster, path string, out any) {
	t.Helper()
	resp, err := apiClient(t, c, "admin").Get(c.API(0) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// pubOwner is an owner as GET /v1/owners publishes it.
type pubOwner struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
	RoutingID  string `json:"routingId"`
	Address    string `json:"address"`
	HTTP       string `json:"http"`
}

func owners(t *testing.T, c *chaos.Cluster) map[string]pubOwner {
	t.Helper()
	var r struct {
		Owners []pubOwner `json:"owners"`
	}
	getJSON(t, c, "/v1/owners", &r)
	out := map[string]pubOwner{}
	for _, o := range r.Owners {
		out[o.ID] = o
	}
	return out
}

// pubObject is an object as GET /v1/objects/<name> publishes it: the record
// verbatim (JSON) and its store version.
type pubObject struct {
	Object       string          `json:"object"`
	Record       json.RawMessage `json:"record"`
	StoreVersion int64           `json:"storeVersion"`
}

func object(t *testing.T, c *chaos.Cluster, name string) pubObject {
	t.Helper()
	var o pubObject
	getJSON(t, c, "/v1/objects/"+name, &o)
	return o
}

// ---------------------------------------------------------------- checks of the result

// etcdState is every key under the cluster's prefix with its mod revision,
// but the background controllers' (their leases and leadership come and go).
func etcdState(t *testing.T, c *chaos.Cluster, prefix string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Etcd().Get(ctx, c.Keys().Base()+prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "/controllers/") {
			continue // the background controllers' own keys (a leader's lease renewed), no object's
		}
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// metric reads one sample of a Prometheus metric from a node's /metrics
// (the first line whose name and labels start with name).
func metric(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := hc.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) && (len(line) == len(name) || line[len(name)] == ' ' || line[len(name)] == '{') {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return v
		}
	}
	return 0
}

// eventually polls cond every 50 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
