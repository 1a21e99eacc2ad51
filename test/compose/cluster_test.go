//go:build compose

package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/mtls"
	"github.com/meshloc/meshloc/pkg/wire"
)

// The cluster's services, as docker-compose.yml names them.
var (
	etcds      = []string{"etcd1", "etcd2", "etcd3"}
	locationds = []string{"locationd1", "locationd2"}
	meshnodes  = []string{"meshnode1", "meshnode2", "meshnode3"}
	services   = slices.Concat(etcds, locationds, meshnodes)
)

const (
	// leaseTTL is the meshnodes' lease TTL: the compose file's default
	// (MESHLOC_LEASE_TTL unset), so the test runs what users run.
	leaseTTL = 3 * time.Second
	// recoveryRate is MESHLOC_RECOVERY_RATE here (the compose file's default
	// is 10,000 per second): at 2 per second a killed node's objects stay
	// orphaned for a few seconds, long enough for the test to see them
	// listed before the recovery controller re-creates them.
	recoveryRate = "2"
	// keyPrefix is the cluster's etcd prefix (locationd's and meshnode's default).
	keyPrefix = "/meshloc/default/"
)

// cluster is one compose project of the test: its image, ports and the
// commands that drive it. model holds the expected value of every counter
// the test wrote to (see add).
type cluster struct {
	root    string   // the module root: docker-compose.yml, Dockerfile
	compose []string // "docker compose" or "docker-compose", as argv
	project string
	image   string
	env     []string // the environment of every compose command
	meshctl string   // the host-built static meshctl
	certs   string   // the cluster's certificates (mounted on /certs)
	ports   ports
	ids     map[string]string // service → container id (stable across stop/start)
	network string            // the compose network of the cluster
	api     []*client.Admin   // locationd1, locationd2 on their published ports

	mu    sync.Mutex
	model map[string]int64 // object → value of every acknowledged write
}

// ports are the host ports the services publish on 127.0.0.1.
type ports struct {
	etcd      [3]int
	locationd [2]int
	grpc      [3]int // meshnode gRPC (gateways)
	http      [3]int // meshnode /healthz, /metrics
}

func (p ports) env() []string {
	var env []string
	for i, v := range p.etcd {
		env = append(env, fmt.Sprintf("MESHLOC_ETCD%d_PORT=%d", i+1, v))
	}
	for i, v := range p.locationd {
		env = append(env, fmt.Sprintf("MESHLOC_LOCATIOND%d_PORT=%d", i+1, v))
	}
	for i := range p.grpc {
		env = append(env, fmt.Sprintf("MESHLOC_MESHNODE%d_PORT=%d", i+1, p.grpc[i]), fmt.Sprintf("MESHLOC_MESHNODE%d_HTTP_PORT=%d", i+1, p.http[i]))
	}
	return env
}

func freePorts(t *testing.T) ports {
	t.Helper()
	var p ports
	for _, ptr := range []*int{&p.etcd[0], &p.etcd[1], &p.etcd[2], &p.locationd[0], &p.locationd[1],
		&p.grpc[0], &p.grpc[1], &p.grpc[2], &p.http[0], &p.http[1], &p.http[2]} {
		v, err := freeport.Get()
		if err != nil {
			t.Fatal(err)
		}
		*ptr = v
	}
	return p
}

// requireDocker returns the compose command, or skips the test (fails it
// when CI=true) if docker or compose is missing.
func requireDocker(t *testing.T) []string {
	t.Helper()
	missing := func(format string, args ...any) []string {
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s: the compose test cannot run", msg)
		}
		t.Skipf("%s: skipping the compose test (CI=true makes this a failure)", msg)
		return nil
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		return missing("no docker engine (docker version: %v: %s)", err, bytes.TrimSpace(out))
	}
	if s := strings.Fields(os.Getenv("MESHLOC_COMPOSE")); len(s) > 0 {
		if out, err := exec.Command(s[0], append(s[1:], "version")...).CombinedOutput(); err != nil {
			return missing("MESHLOC_COMPOSE=%q does not run (%v: %s)", os.Getenv("MESHLOC_COMPOSE"), err, bytes.TrimSpace(out))
		}
		return s
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if exec.Command("docker-compose", "version").Run() == nil {
		return []string{"docker-compose"}
	}
	return missing("neither `docker compose` nor `docker-compose` runs")
}

// start builds the binaries and the image, brings the cluster up and waits
// until every service is healthy. Everything it makes is removed by a
// t.Cleanup registered before it is made.
func start(t *testing.T) *cluster {
	composeCmd := requireDocker(t)
	c := &cluster{compose: composeCmd, ids: map[string]string{}, model: map[string]int64{}}
	c.root = moduleRoot(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	c.project = "meshloctest" + hex.EncodeToString(b[:])
	c.image = "meshloc-compose-test:" + c.project
	t.Logf("compose: %s, project %s, image %s", strings.Join(c.compose, " "), c.project, c.image)
	t.Cleanup(func() { c.teardown(t) })

	began := time.Now()
	ctxDir := t.TempDir()
	c.meshctl = c.buildBinaries(t, ctxDir)
	c.certs = makeCerts(t)
	if out, err := c.run(10*time.Minute, "docker", "build", "-q", "-f", filepath.Join(c.root, "Dockerfile"), "-t", c.image, ctxDir); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Logf("static binaries and image built in %v", time.Since(began).Round(100*time.Millisecond))

	began = time.Now()
	for attempt := 1; ; attempt++ {
		c.ports = freePorts(t)
		c.env = append(os.Environ(), "COMPOSE_PROJECT_NAME="+c.project, "MESHLOC_IMAGE="+c.image, "MESHLOC_CERTS="+c.certs,
			"MESHLOC_RECOVERY_RATE="+recoveryRate, "MESHLOC_RECOVER_ORPHANS=true", "MESHLOC_LEASE_TTL="+leaseTTL.String())
		c.env = append(c.env, c.ports.env()...)
		out, err := c.composeRun(3*time.Minute, "up", "-d")
		if err == nil {
			break
		}
		// A port picked free may have been taken since (docker-proxy binds
		// it only now): try again with others.
		if attempt < 3 && (strings.Contains(out, "already allocated") || strings.Contains(out, "address already in use")) {
			t.Logf("up: a port was taken, again with other ports: %s", lastLines(out, 3))
			_, _ = c.composeRun(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5")
			continue
		}
		t.Fatalf("%s up -d: %v\n%s", strings.Join(c.compose, " "), err, out)
	}
	for _, s := range services {
		out, err := c.composeRun(time.Minute, "ps", "-q", s)
		id := strings.TrimSpace(out)
		if err != nil || id == "" || strings.Contains(id, "\n") {
			t.Fatalf("ps -q %s: %q %v", s, out, err)
		}
		c.ids[s] = id
	}
	out, err := c.run(30*time.Second, "docker", "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", c.ids["meshnode1"])
	if nets := strings.Fields(out); err != nil || len(nets) != 1 {
		t.Fatalf("the network of meshnode1: %q %v", out, err)
	} else {
		c.network = nets[0]
	}
	admin, err := mtls.Load(c.files("admin"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: admin.ClientConfig(mtls.WantRole(mtls.RoleLocationd))}}
	for _, p := range c.ports.locationd {
		a, err := client.NewAdmin(fmt.Sprintf("https://127.0.0.1:%d", p), hc)
		if err != nil {
			t.Fatal(err)
		}
		c.api = append(c.api, a)
	}
	c.waitSteady(t, 3*time.Minute)
	t.Logf("cluster up and healthy in %v: etcd on %v, locationd on %v, meshnodes gRPC %v, HTTP %v", time.Since(began).Round(100*time.Millisecond),
		c.ports.etcd, c.ports.locationd, c.ports.grpc, c.ports.http)
	return c
}

// makeCerts makes the cluster's certificates as `make certs` does, in a
// directory of the test (the containers run as 65532: the keys are made
// readable by every user).
func makeCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	names, err := mtls.Init(dir, mtls.InitOptions{Nodes: meshnodes, Locationd: locationds, Etcd: etcds, Hosts: []string{"localhost", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.Chmod(filepath.Join(dir, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// files are the certificate files of name with the cluster CA.
func (c *cluster) files(name string) mtls.Files {
	return mtls.Files{CA: filepath.Join(c.certs, "ca.crt"), Cert: filepath.Join(c.certs, name+".crt"), Key: filepath.Join(c.certs, name+".key")}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %q %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

// buildBinaries builds the image's context as `make docker-bin` does (static
// binaries in build/docker/bin, the empty directories in
// build/docker/rootfs) under dir, and returns the path of meshctl.
func (c *cluster) buildBinaries(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "build", "docker", "bin")
	etcdDir := filepath.Join(dir, "build", "docker", "rootfs", "var", "lib", "etcd")
	tmp := filepath.Join(dir, "build", "docker", "rootfs", "tmp")
	for _, d := range []string{bin, etcdDir, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(etcdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "CGO_ENABLED=0")
	for _, args := range [][]string{
		{"build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(bin, "etcd"), "go.etcd.io/etcd/server/v3"},
		{"build", "-trimpath", "-ldflags=-s -w", "-o", bin + string(filepath.Separator), "go.etcd.io/etcd/etcdctl/v3", "./cmd/locationd", "./cmd/meshnode", "./cmd/meshctl"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = c.root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(bin, "meshctl")
}

// teardown prints the services' logs if the test failed, then removes the
// project (containers, network, volumes) and the image, and checks that
// nothing of the run is left.
func (c *cluster) teardown(t *testing.T) {
	if c.env != nil {
		// A fault subtest that stopped half-way leaves no paused container
		// behind (docker cannot stop a frozen process).
		for _, s := range meshnodes {
			if id := c.ids[s]; id != "" {
				if st, err := c.inspect(s); err == nil && st.Paused {
					_, _ = c.run(30*time.Second, "docker", "unpause", id)
				}
			}
		}
		if t.Failed() {
			c.dumpLogs(t)
		}
		if out, err := c.composeRun(3*time.Minute, "down", "-v", "--remove-orphans", "-t", "20"); err != nil {
			t.Errorf("down -v: %v\n%s", err, out)
		}
	}
	if out, err := c.run(time.Minute, "docker", "image", "rm", "-f", c.image); err != nil && !strings.Contains(out, "No such image") {
		t.Errorf("docker image rm %s: %v\n%s", c.image, err, out)
	}
	label := "label=com.docker.compose.project=" + c.project
	for _, what := range [][]string{
		{"docker", "ps", "-aq", "--filter", label},
		{"docker", "volume", "ls", "-q", "--filter", label},
		{"docker", "network", "ls", "-q", "--filter", label},
		{"docker", "images", "-q", c.image},
	} {
		if out, err := c.run(30*time.Second, what[0], what[1:]...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("left behind: %s: %q %v", strings.Join(what, " "), out, err)
		}
	}
}

func (c *cluster) dumpLogs(t *testing.T) {
	out, _ := c.composeRun(time.Minute, "ps")
	t.Logf("%s ps:\n%s", strings.Join(c.compose, " "), out)
	for _, s := range services {
		out, err := c.composeRun(time.Minute, "logs", "--no-color", "--tail", "200", s)
		t.Logf("---- logs --tail 200 %s (%v) ----\n%s", s, err, out)
	}
}

// run runs a command in the module root with the cluster's environment and
// returns its standard output; on failure the error carries its standard
// error too.
func (c *cluster) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	if c.env != nil {
		cmd.Env = c.env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// logs is what a service's container wrote, stdout and stderr (the
// binaries log to stderr), since a time (RFC 3339; "" for all of it).
func (c *cluster) logs(service, since string) (string, error) {
	args := []string{"logs"}
	if since != "" {
		args = append(args, "--since", since)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", append(args, c.ids[service])...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker logs %s: %w: %s", service, err, lastLines(string(out), 3))
	}
	return string(out), nil
}

// composeRun runs the compose command on the cluster's project and file.
func (c *cluster) composeRun(timeout time.Duration, args ...string) (string, error) {
	argv := append(slices.Clone(c.compose[1:]), "-p", c.project, "-f", filepath.Join(c.root, "docker-compose.yml"))
	return c.run(timeout, c.compose[0], append(argv, args...)...)
}

// docker runs a docker command on a service's container ("{}" in args is
// replaced by its id), failing t on an error.
func (c *cluster) docker(t *testing.T, service string, args ...string) string {
	t.Helper()
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = strings.ReplaceAll(a, "{}", c.ids[service])
	}
	out, err := c.run(2*time.Minute, "docker", argv...)
	if err != nil {
		t.Fatalf("%s: %v", service, err)
	}
	return out
}

// containerState is what docker inspect says of a container.
type containerState struct {
	Status   string // running, paused, restarting, exited, ...
	Running  bool
	Paused   bool
	ExitCode int
	Health   *struct{ Status string }
	Restarts int `json:"-"`
}

func (s containerState) health() string {
	if s.Health == nil {
		return "none"
	}
	return s.Health.Status
}

func (s containerState) String() string {
	return fmt.Sprintf("%s, health %s, exit code %d, restarted %d times", s.Status, s.health(), s.ExitCode, s.Restarts)
}

func (c *cluster) inspect(service string) (containerState, error) {
	out, err := c.run(30*time.Second, "docker", "inspect", "-f", "{{.RestartCount}} {{json .State}}", c.ids[service])
	if err != nil {
		return containerState{}, err
	}
	n, js, _ := strings.Cut(strings.TrimSpace(out), " ")
	var st containerState
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return st, fmt.Errorf("docker inspect %s: %w: %s", service, err, out)
	}
	st.Restarts, _ = strconv.Atoi(n)
	return st, nil
}

func (c *cluster) mustInspect(t *testing.T, service string) containerState {
	t.Helper()
	st, err := c.inspect(service)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually calls check every 250 ms until it returns "" (done), and fails
// t with what and check's last answer if that has not happened within d.
func eventually(t *testing.T, d time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, d, why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// locd runs f against locationd1, else locationd2.
func (c *cluster) locd(f func(context.Context, *client.Admin) error) error {
	var errs []error
	for _, a := range c.api {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx, a)
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", a.Base(), err))
	}
	return errors.Join(errs...)
}

// owners are the live owners, by id.
func (c *cluster) owners() (map[string]api.Owner, error) {
	var r api.OwnersResponse
	err := c.locd(func(ctx context.Context, a *client.Admin) (err error) { r, _, err = a.Owners(ctx); return err })
	if err != nil {
		return nil, err
	}
	m := map[string]api.Owner{}
	for _, o := range r.Owners {
		m[o.ID] = o
	}
	return m, nil
}

func (c *cluster) mustOwners(t *testing.T) map[string]api.Owner {
	t.Helper()
	m, err := c.owners()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// objects lists authority records (owner "" and orphaned nil: all).
func (c *cluster) objects(owner string, orphaned *bool) ([]api.Object, error) {
	var r api.ObjectsResponse
	err := c.locd(func(ctx context.Context, a *client.Admin) (err error) {
		r, _, err = a.Objects(ctx, api.ObjectsQuery{Owner: owner, Orphaned: orphaned})
		return err
	})
	return r.Objects, err
}

func (c *cluster) object(name string) (api.ObjectResponse, error) {
	var r api.ObjectResponse
	err := c.locd(func(ctx context.Context, a *client.Admin) (err error) { r, _, err = a.Object(ctx, name); return err })
	return r, err
}

// waitSteady waits until every container is running and healthy and the
// three meshnodes are live, serving owners.
func (c *cluster) waitSteady(t *testing.T, d time.Duration) {
	t.Helper()
	eventually(t, d, "every service healthy and 3 serving owners", func() string {
		var bad []string
		for _, s := range services {
			st, err := c.inspect(s)
			if err != nil {
				return err.Error()
			}
			if !st.Running || st.Paused || st.health() != "healthy" {
				bad = append(bad, s+": "+st.String())
			}
		}
		if len(bad) > 0 {
			return strings.Join(bad, "; ")
		}
		owners, err := c.owners()
		if err != nil {
			return err.Error()
		}
		for _, n := range meshnodes {
			if o, ok := owners[n]; !ok || o.State != "serving" {
				return fmt.Sprintf("owners: %v", ownerList(owners))
			}
		}
		return ""
	})
}

func ownerList(m map[string]api.Owner) string {
	var s []string
	for _, o := range m {
		s = append(s, fmt.Sprintf("%s@%d %s %s", o.ID, o.Generation, o.State, o.Address))
	}
	slices.Sort(s)
	return "[" + strings.Join(s, ", ") + "]"
}

// etcdctl runs etcdctl in a running etcd container (etcd1 first), with the
// container's default endpoint (its own member, 127.0.0.1:2379) unless args
// say otherwise: `docker-compose exec -T etcdN etcdctl ARGS`.
func (c *cluster) etcdctl(t *testing.T, args ...string) string {
	t.Helper()
	var errs []string
	for _, m := range etcds {
		if st, err := c.inspect(m); err != nil || !st.Running {
			continue
		}
		out, err := c.composeRun(time.Minute, append([]string{"exec", "-T", m, "etcdctl"}, args...)...)
		if err == nil {
			return out
		}
		errs = append(errs, err.Error())
	}
	t.Fatalf("etcdctl %s: no running member answered: %s", strings.Join(args, " "), strings.Join(errs, "; "))
	return ""
}

// record reads an object's authority record from etcd with etcdctl.
func (c *cluster) record(t *testing.T, object string) authority.Record {
	t.Helper()
	out := c.etcdctl(t, "get", keyPrefix+"authority/"+object, "--print-value-only")
	var r authority.Record
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("etcdctl get %s: %v: %q", keyPrefix+"authority/"+object, err, out)
	}
	return r
}

// reply is a successful call's answer, from meshctl -o json.
type reply struct {
	Value    int64
	Fence    authority.Fence
	Replayed bool
}

// callError is meshctl's error line: "meshctl: <code>: <message>".
type callError struct {
	Code, Line string
}

func (e *callError) Error() string { return e.Line }

// final reports whether a failed call must not be retried with the same
// operation id: it was refused for good (state_lost: the object was
// re-created and the request not executed; or a bad request).
func (e *callError) final() bool {
	switch e.Code {
	case "state_lost", "invalid_argument", "unknown_type", "unknown_method", "application_error", "usage", "operation_expired":
		return true
	}
	return false
}

// call runs the host-built meshctl once: `meshctl --node 127.0.0.1:<port of
// meshnode node> call --op-id op OBJECT METHOD ARGS`.
func (c *cluster) call(node int, timeout time.Duration, op, object, method string, args ...string) (reply, error) {
	f := c.files("operator")
	argv := []string{"--timeout", timeout.String(), "--node", fmt.Sprintf("127.0.0.1:%d", c.ports.grpc[node]), "-o", "json",
		"--cacert", f.CA, "--cert", f.Cert, "--key", f.Key, "call", "--op-id", op, object, method, "--"}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.meshctl, append(argv, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		line := strings.TrimSpace(stderr.String())
		code := "?"
		if rest, ok := strings.CutPrefix(line, "meshctl: "); ok {
			code, _, _ = strings.Cut(rest, ":")
		}
		if line == "" {
			line = err.Error()
		}
		return reply{}, &callError{Code: code, Line: fmt.Sprintf("via %s: %s", meshnodes[node], line)}
	}
	var out struct {
		Payload  struct{ Value *int64 }
		Fence    authority.Fence
		Replayed bool
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Payload.Value == nil {
		return reply{}, fmt.Errorf("via %s: meshctl call %s %s: unexpected output %q (%v)", meshnodes[node], object, method, stdout.String(), err)
	}
	return reply{Value: *out.Payload.Value, Fence: out.Fence, Replayed: out.Replayed}, nil
}

// callRetry calls with one operation id, again while the answer is not
// final, for at most d: a retry is never executed twice.
func (c *cluster) callRetry(node int, d time.Duration, object, method string, args ...string) (reply, error) {
	op := wire.NewOperationID().String()
	deadline := time.Now().Add(d)
	for {
		r, err := c.call(node, 5*time.Second, op, object, method, args...)
		var ce *callError
		if err == nil || (errors.As(err, &ce) && ce.final()) || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// durable: the dcounter type keeps its state in etcd; counter in memory.
func durable(object string) bool { return strings.HasPrefix(object, "actor/dcounter/") }

// add adds n to a counter through node and checks the reply against the
// model. A memory counter answered state_lost (re-created after its owner
// died) restarts from 0 in the model, and the call is sent again; a durable
// one must never say so.
func (c *cluster) add(t *testing.T, node int, object string, n int64) reply {
	t.Helper()
	return c.counterCall(t, node, object, n, "add", strconv.FormatInt(n, 10))
}

// get reads a counter through node and checks it against the model (see add
// for state_lost).
func (c *cluster) get(t *testing.T, node int, object string) reply {
	t.Helper()
	return c.counterCall(t, node, object, 0, "get")
}

// counterCall is add (delta n) and get (delta 0).
func (c *cluster) counterCall(t *testing.T, node int, object string, delta int64, method string, args ...string) reply {
	t.Helper()
	args = append([]string{method}, args...) // for the messages
	for range 2 {
		r, err := c.callRetry(node, 45*time.Second, object, method, args[1:]...)
		var ce *callError
		if errors.As(err, &ce) && ce.Code == "state_lost" && !durable(object) {
			t.Logf("%s: %s (memory object re-created: its value restarts from 0)", object, ce.Line)
			c.setModel(object, 0)
			continue
		}
		if err != nil {
			t.Fatalf("%v on %s: %v", args, object, err)
		}
		want := c.modelOf(object) + delta
		if r.Value != want {
			t.Fatalf("%v on %s via %s: value %d, want %d (served by %s)", args, object, meshnodes[node], r.Value, want, r.Fence.Owner)
		}
		c.setModel(object, want)
		return r
	}
	t.Fatalf("%v on %s: state_lost twice", args, object)
	return reply{}
}

func (c *cluster) modelOf(object string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.model[object]
}

func (c *cluster) setModel(object string, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.model[object] = v
}

func (c *cluster) modelObjects() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for o := range c.model {
		s = append(s, o)
	}
	slices.Sort(s)
	return s
}

// relocate moves object to target through locationd (POST /v1/relocations)
// and returns the outcome; it fails t unless the relocation completed,
// trying again (up to d) while the API says the state does not allow it yet
// (conflict, unavailable) or the relocation aborted.
func (c *cluster) relocate(t *testing.T, d time.Duration, object, target string) api.Relocation {
	t.Helper()
	var rel api.Relocation
	eventually(t, d, fmt.Sprintf("relocation of %s to %q completes", object, target), func() string {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		rel, _, err = c.api[0].Relocate(ctx, api.RelocateRequest{Object: object, Target: target})
		if err != nil {
			rel, _, err = c.api[1].Relocate(ctx, api.RelocateRequest{Object: object, Target: target})
		}
		switch {
		case err != nil:
			return err.Error()
		case rel.Outcome != "completed":
			return fmt.Sprintf("%s %s -> %s: %s (%s: %s)", rel.RelocationID, rel.Source, rel.Target, rel.Outcome, rel.Code, rel.Message)
		}
		return ""
	})
	return rel
}

// place makes node the owner of object (creating it with a get if it has
// no record yet).
func (c *cluster) place(t *testing.T, object, node string) {
	t.Helper()
	r, err := c.object(object)
	if errors.Is(err, api.ErrNotFound) {
		c.get(t, 0, object)
		r, err = c.object(object)
	}
	if err != nil {
		t.Fatalf("%s: %v", object, err)
	}
	if r.Record.Owner.ID == node {
		return
	}
	c.relocate(t, 45*time.Second, object, node)
}

// ownedBy lists the objects whose record names owner.
func (c *cluster) ownedBy(t *testing.T, owner string) []api.Object {
	t.Helper()
	objs, err := c.objects(owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// nodeIndex is the index of a meshnode service.
func nodeIndex(name string) int { return slices.Index(meshnodes, name) }

// lastLines are the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
