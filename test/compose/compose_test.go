//go:build compose

package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/wire"
)

// TestCompose brings up docker-compose.yml and breaks it as its users
// would; see doc.go. The subtests run in order on one cluster: each fault
// subtest starts from a steady cluster and leaves one behind.
func TestCompose(t *testing.T) {
	began := time.Now()
	c := start(t)
	if !t.Run("cluster forms", c.testForms) {
		t.FailNow() // the rest needs it
	}
	t.Run("calls succeed through every node", c.testCalls)
	t.Run("a relocation commits", c.testRelocation)
	t.Run("docker stop of an etcd member", c.testEtcdStop)
	t.Run("docker kill of a meshnode", c.testKill)
	t.Run("docker pause of an owner past its TTL", c.testPause)
	t.Run("docker network disconnect of an owner", c.testDisconnect)
	t.Run("every object reads its acknowledged value through every node", c.testFinal)
	t.Logf("compose test: %v, the binaries' and image's build included, the teardown not", time.Since(began).Round(time.Second))
}

func (c *cluster) testForms(t *testing.T) {
	// etcd: three members, each healthy (a linearizable read through it).
	out := c.etcdctl(t, "endpoint", "health", "--cluster")
	if n := strings.Count(out, "is healthy"); n != 3 {
		t.Errorf("etcdctl endpoint health: %d of 3 members healthy:\n%s", n, out)
	}
	out = c.etcdctl(t, "member", "list")
	if n := strings.Count(out, ", started, "); n != 3 {
		t.Errorf("etcdctl member list: %d of 3 members started:\n%s", n, out)
	}
	// Both locationd reach etcd; one of them leads the recovery controller.
	for _, a := range c.api {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.Ready(ctx); err != nil {
			t.Errorf("locationd %s /readyz: %v", a.Base(), err)
		}
		r, _, err := a.Controllers(ctx)
		cancel()
		if err != nil {
			t.Errorf("locationd %s /v1/controllers: %v", a.Base(), err)
			continue
		}
		for _, ctl := range r.Controllers {
			if ctl.Name == "recovery" && (ctl.Leader == nil || !ctl.Leader.RecoverOrphans) {
				t.Errorf("locationd %s: recovery controller leader %+v (want one, recovering orphans)", a.Base(), ctl.Leader)
			}
		}
	}
	// The three meshnodes are live owners that advertise their compose names.
	owners := c.mustOwners(t)
	for _, n := range meshnodes {
		o, ok := owners[n]
		if !ok || o.State != "serving" || o.Address != n+":7100" {
			t.Errorf("owner %s: %+v (want serving at %s:7100); owners %s", n, o, n, ownerList(owners))
		}
	}
	if len(owners) != 3 {
		t.Errorf("owners: %s (want exactly meshnode1..3)", ownerList(owners))
	}
	// Each meshnode's published HTTP port answers /healthz.
	for i, n := range meshnodes {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports.http[i]))
		if err != nil {
			t.Errorf("%s /healthz: %v", n, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s /healthz: %s", n, resp.Status)
		}
	}
	// And docker agrees: every container healthy (waitSteady in start).
	for _, s := range services {
		if st := c.mustInspect(t, s); st.health() != "healthy" {
			t.Errorf("%s: %s", s, st)
		}
	}
}

// everyObjects are a memory and a durable counter on each meshnode.
func everyObjects(node string) []string {
	return []string{"actor/counter/every-" + node, "actor/dcounter/every-" + node}
}

func (c *cluster) testCalls(t *testing.T) {
	for _, n := range meshnodes {
		for _, o := range everyObjects(n) {
			c.place(t, o, n)
		}
	}
	// Each object through each gateway: the reply comes from its owner.
	for g := range meshnodes {
		for _, n := range meshnodes {
			for _, o := range everyObjects(n) {
				r := c.add(t, g, o, int64(g+1))
				if r.Fence.Owner.ID != n {
					t.Errorf("add to %s through %s: served by %s, want its owner %s", o, meshnodes[g], r.Fence.Owner, n)
				}
			}
		}
	}
	for g := range meshnodes {
		for _, n := range meshnodes {
			for _, o := range everyObjects(n) {
				c.get(t, g, o)
			}
		}
	}
}

func (c *cluster) testRelocation(t *testing.T) {
	const object = "actor/counter/every-meshnode1"
	before := c.record(t, object)
	if before.Owner.ID != "meshnode1" {
		t.Fatalf("%s: owned by %s before the relocation, want meshnode1", object, before.Owner)
	}
	owners := c.mustOwners(t)
	rel := c.relocate(t, 45*time.Second, object, "meshnode2")
	t.Logf("relocation %s %s -> %s: %s in %.2fms", rel.RelocationID, rel.Source, rel.Target, rel.Outcome, float64(rel.InterruptionMicros)/1000)
	after := c.record(t, object)
	want := before
	want.Owner = authority.OwnerRef{ID: "meshnode2", Generation: owners["meshnode2"].Generation}
	want.Node = after.Node
	want.AuthorityGeneration = before.AuthorityGeneration + 1
	want.LastRelocation = rel.RelocationID
	if after.Node.Address != "meshnode2:7100" || !recordsEqual(after, want) {
		t.Errorf("%s in etcd after the relocation:\n %+v\nwant\n %+v", object, after, want)
	}
	// The README's command shows it.
	out, err := c.composeRun(time.Minute, "exec", "-T", "etcd1", "etcdctl", "get", "--prefix", "/meshloc/")
	if err != nil {
		t.Fatalf("exec etcd1 etcdctl get --prefix /meshloc/: %v", err)
	}
	lines := strings.Split(out, "\n")
	if i := slices.Index(lines, keyPrefix+"authority/"+object); i < 0 || i+1 >= len(lines) || !strings.Contains(lines[i+1], `"owner":{"id":"meshnode2"`) {
		t.Errorf("exec etcd1 etcdctl get --prefix /meshloc/: no record of %s owned by meshnode2 in:\n%s", object, out)
	}
	// The value moved with it.
	if r := c.get(t, 2, object); r.Fence.Owner.ID != "meshnode2" || r.Fence.AuthorityGeneration != want.AuthorityGeneration {
		t.Errorf("get %s after the relocation: served under %+v, want meshnode2 with authority generation %d", object, r.Fence, want.AuthorityGeneration)
	}
}

func recordsEqual(a, b authority.Record) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// etcdLeader is the service of the etcd leader.
func (c *cluster) etcdLeader(t *testing.T) string {
	t.Helper()
	out := c.etcdctl(t, "endpoint", "status", "--cluster", "-w", "json")
	var st []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			}
			Leader uint64
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("etcdctl endpoint status: %v: %s", err, out)
	}
	for _, s := range st {
		if s.Status.Header.MemberID == s.Status.Leader {
			for _, m := range etcds {
				if strings.Contains(s.Endpoint, "//"+m+":") {
					return m
				}
			}
		}
	}
	t.Fatalf("etcdctl endpoint status: no leader among %s", out)
	return ""
}

// nodeLives are the meshnodes' owner generations and restart counts: a node
// that fenced itself changes both.
func (c *cluster) nodeLives(t *testing.T) map[string]string {
	t.Helper()
	owners := c.mustOwners(t)
	m := map[string]string{}
	for _, n := range meshnodes {
		m[n] = fmt.Sprintf("generation %d, container restarted %d times", owners[n].Generation, c.mustInspect(t, n).Restarts)
	}
	return m
}

func (c *cluster) testEtcdStop(t *testing.T) {
	c.waitSteady(t, 90*time.Second)
	victim := c.etcdLeader(t)
	lives := c.nodeLives(t)
	t.Logf("stopping %s, the etcd leader", victim)
	c.docker(t, victim, "stop", "-t", "30", "{}")
	defer func() {
		if st, err := c.inspect(victim); err == nil && !st.Running {
			_, _ = c.run(time.Minute, "docker", "start", c.ids[victim])
		}
	}()
	if st := c.mustInspect(t, victim); st.Running {
		t.Fatalf("%s still running after docker stop: %s", victim, st)
	}
	// Two members of three are a quorum: calls (durable ones write to etcd)
	// through every node, and a relocation, still succeed.
	for g := range meshnodes {
		for _, o := range everyObjects(meshnodes[(g+1)%3]) {
			c.add(t, g, o, 100)
		}
	}
	const object = "actor/counter/every-meshnode3"
	rec, err := c.object(object)
	if err != nil {
		t.Fatal(err)
	}
	target := "meshnode1"
	if rec.Record.Owner.ID == target {
		target = "meshnode2"
	}
	rel := c.relocate(t, 60*time.Second, object, target)
	t.Logf("with %s stopped: relocation %s -> %s %s", victim, rel.Source, rel.Target, rel.Outcome)
	c.get(t, 0, object)
	for _, a := range c.api {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.Ready(ctx); err != nil {
			t.Errorf("locationd %s not ready with %s stopped: %v", a.Base(), victim, err)
		}
		cancel()
	}
	if now := c.nodeLives(t); !mapsEqual(now, lives) {
		t.Errorf("a meshnode fenced itself while one etcd member of three was stopped: before %v, after %v", lives, now)
	}

	c.docker(t, victim, "start", "{}")
	c.waitSteady(t, 2*time.Minute)
	out := c.etcdctl(t, "endpoint", "health", "--cluster")
	if n := strings.Count(out, "is healthy"); n != 3 {
		t.Errorf("after docker start %s: %d of 3 members healthy:\n%s", victim, n, out)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (c *cluster) testKill(t *testing.T) {
	c.waitSteady(t, 90*time.Second)
	const victim = "meshnode3"
	for i := 1; i <= 6; i++ {
		o := fmt.Sprintf("actor/counter/kill-%d", i)
		c.place(t, o, victim)
		c.add(t, 0, o, int64(10*i))
	}
	c.place(t, "actor/dcounter/kill-d", victim)
	c.add(t, 0, "actor/dcounter/kill-d", 7)

	before := map[string]api.Object{}
	for _, o := range c.ownedBy(t, victim) {
		before[o.Object] = o
	}
	gen := c.mustOwners(t)[victim].Generation
	restarts := c.mustInspect(t, victim).Restarts
	t.Logf("killing %s@%d, owner of %d objects", victim, gen, len(before))
	c.docker(t, victim, "kill", "{}")

	// Its objects are orphaned (listed with orphaned=true) until the
	// recovery controller re-creates each on a live node.
	orphanedSeen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		yes := true
		objs, err := c.objects("", &yes)
		if err == nil {
			for _, o := range objs {
				if _, ok := before[o.Object]; ok && o.Record.Owner.ID == victim && o.Record.Owner.Generation == gen {
					orphanedSeen[o.Object] = true
				}
			}
		}
		var left []string
		all, err := c.objects("", nil)
		if err == nil {
			byName := map[string]api.Object{}
			for _, o := range all {
				byName[o.Object] = o
			}
			for name := range before {
				if o := byName[name]; o.Record.Owner.ID == victim || !o.OwnerAlive {
					left = append(left, name+" on "+o.Record.Owner.String())
				}
			}
		} else {
			left = []string{err.Error()}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects of the killed %s not re-created elsewhere within 60s: %v", victim, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d of %d objects of %s seen listed orphaned (GET /v1/objects?orphaned=true) before their recovery", len(orphanedSeen), len(before), victim)
	if len(orphanedSeen) == 0 {
		t.Errorf("no object of the killed %s was ever listed orphaned", victim)
	}
	if _, ok := c.mustOwners(t)[victim]; ok {
		t.Errorf("%s still a live owner after docker kill", victim)
	}
	for name, b := range before {
		r, err := c.object(name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Record.ObjectGeneration != b.Record.ObjectGeneration+1 || r.Record.Owner.ID == victim || !r.OwnerAlive {
			t.Errorf("%s after the kill: %s (alive %v), object generation %d (want a live owner other than %s, generation %d)",
				name, r.Record.Owner, r.OwnerAlive, r.Record.ObjectGeneration, victim, b.Record.ObjectGeneration+1)
		}
	}
	// They serve again: memory objects say once that their state is lost,
	// durable ones kept theirs.
	for name := range before {
		r := c.get(t, 0, name)
		if r.Fence.Owner.ID == victim {
			t.Errorf("get %s: served by the killed %s", name, r.Fence.Owner)
		}
		c.add(t, 1, name, 1)
	}
	if got := c.modelOf("actor/dcounter/kill-d"); got != 8 {
		t.Errorf("actor/dcounter/kill-d = %d after the kill, want 8 (7 before, +1)", got)
	}
	// docker kill is a stop by hand: Docker does not restart it.
	if st := c.mustInspect(t, victim); st.Running || st.Restarts != restarts || st.ExitCode != 137 {
		t.Errorf("%s after docker kill: %s (want exited with 137, not restarted)", victim, st)
	}

	c.docker(t, victim, "start", "{}")
	c.waitSteady(t, 2*time.Minute)
	if o := c.mustOwners(t)[victim]; o.Generation <= gen {
		t.Errorf("%s restarted as generation %d, want > %d", victim, o.Generation, gen)
	}
}

// callResult is one call's outcome, for the checks of the paused owner.
type callResult struct {
	object string
	r      reply
	err    error
	at     time.Time
}

func (c *cluster) testPause(t *testing.T) {
	c.waitSteady(t, 90*time.Second)
	const victim = "meshnode2"
	vi := nodeIndex(victim)
	objects := []string{"actor/counter/pause-m", "actor/dcounter/pause-d"}
	for _, o := range objects {
		c.place(t, o, victim)
		c.add(t, 0, o, 10)
	}
	gen := c.mustOwners(t)[victim].Generation
	restarts := c.mustInspect(t, victim).Restarts
	old := authority.OwnerRef{ID: victim, Generation: gen}

	pausedAt := time.Now()
	c.docker(t, victim, "pause", "{}")
	defer func() {
		if st, err := c.inspect(victim); err == nil && st.Paused {
			_, _ = c.run(time.Minute, "docker", "unpause", c.ids[victim])
		}
	}()
	t.Logf("paused %s", old)
	eventually(t, 30*time.Second, fmt.Sprintf("etcd expires the lease of the paused %s", old), func() string {
		owners, err := c.owners()
		if err != nil {
			return err.Error()
		}
		if o, ok := owners[victim]; ok && o.Generation == gen {
			return "still live: " + ownerList(owners)
		}
		return ""
	})
	// Served elsewhere while it sleeps.
	for _, o := range objects {
		r := c.add(t, 0, o, 1)
		if r.Fence.Owner == old {
			t.Fatalf("add to %s: served by the paused %s", o, old)
		}
		t.Logf("%s served by %s while %s is paused", o, r.Fence.Owner, old)
	}
	if wait := time.Until(pausedAt.Add(3 * leaseTTL)); wait > 0 {
		time.Sleep(wait)
	}

	// Calls sent straight to it while it is frozen wait in its sockets; it
	// reads them when it wakes.
	var mu sync.Mutex
	var results []callResult
	var wg sync.WaitGroup
	for _, o := range objects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.call(vi, 30*time.Second, wire.NewOperationID().String(), o, "get")
			mu.Lock()
			results = append(results, callResult{o, r, err, time.Now()})
			mu.Unlock()
		}()
	}
	time.Sleep(time.Second)
	c.docker(t, victim, "unpause", "{}")
	t.Logf("unpaused %s after %v", old, time.Since(pausedAt).Round(100*time.Millisecond))
	// And more right after it woke.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		for _, o := range objects {
			r, err := c.call(vi, 5*time.Second, wire.NewOperationID().String(), o, "get")
			mu.Lock()
			results = append(results, callResult{o, r, err, time.Now()})
			mu.Unlock()
		}
	}
	wg.Wait()
	answered := 0
	for _, res := range results {
		switch {
		case res.err != nil:
			t.Logf("call to %s through the woken %s: %v", res.object, victim, res.err)
			var ce *callError
			if errors.As(res.err, &ce) && ce.Code == "state_lost" {
				t.Errorf("get %s through the woken %s: %v (its state_lost was answered already)", res.object, victim, res.err)
			}
		case res.r.Fence.Owner == old:
			t.Errorf("get %s through the woken %s: served by %s itself (value %d) after another owner served it", res.object, victim, old, res.r.Value)
		case res.r.Value != c.modelOf(res.object):
			t.Errorf("get %s through the woken %s: value %d, want %d (served by %s)", res.object, victim, res.r.Value, c.modelOf(res.object), res.r.Fence.Owner)
		default:
			answered++
		}
	}
	t.Logf("%d calls sent to the woken %s: %d answered by the current owner with the current value, %d refused or unreachable (it fences itself and restarts)",
		len(results), old, answered, len(results)-answered)

	// It fenced itself, exited and was restarted (on-failure) as a new owner.
	eventually(t, 90*time.Second, fmt.Sprintf("%s restarted as a new owner", victim), func() string {
		owners, err := c.owners()
		if err != nil {
			return err.Error()
		}
		st, err := c.inspect(victim)
		if err != nil {
			return err.Error()
		}
		if o, ok := owners[victim]; !ok || o.Generation <= gen || st.Restarts <= restarts {
			return fmt.Sprintf("owners %s; container %s (restarted %d times before)", ownerList(owners), st, restarts)
		}
		return ""
	})
	if logs, err := c.logs(victim, ""); err != nil || !strings.Contains(logs, "lease ended") {
		t.Errorf("%s's log does not say it fenced itself (\"lease ended\"; %v):\n%s", victim, err, lastLines(logs, 20))
	}
	c.waitSteady(t, 2*time.Minute)
	for _, o := range c.ownedBy(t, victim) {
		if o.Record.Owner == old {
			t.Errorf("%s still owned by the woken %s", o.Object, old)
		}
	}
	for _, o := range objects {
		if r := c.get(t, vi, o); r.Fence.Owner == old {
			t.Errorf("get %s through %s after its restart: served by %s", o, victim, old)
		}
	}
	if got := c.modelOf("actor/dcounter/pause-d"); got != 11 {
		t.Errorf("actor/dcounter/pause-d = %d, want 11 (10 before the pause, +1 during it)", got)
	}
}

// networks lists the networks a container is connected to.
func (c *cluster) networks(t *testing.T, service string) []string {
	t.Helper()
	return strings.Fields(c.docker(t, service, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", "{}"))
}

func (c *cluster) testDisconnect(t *testing.T) {
	c.waitSteady(t, 90*time.Second)
	const victim = "meshnode1"
	objects := []string{"actor/counter/net-m", "actor/dcounter/net-d"}
	for _, o := range objects {
		c.place(t, o, victim)
		c.add(t, 1, o, 20)
	}
	gen := c.mustOwners(t)[victim].Generation
	old := authority.OwnerRef{ID: victim, Generation: gen}
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)

	c.docker(t, victim, "network", "disconnect", c.network, "{}")
	reconnect := func() {
		if !slices.Contains(c.networks(t, victim), c.network) {
			// The service name is the alias the other nodes dial.
			c.docker(t, victim, "network", "connect", "--alias", victim, c.network, "{}")
		}
	}
	defer reconnect()
	t.Logf("disconnected %s from %s", old, c.network)

	// Cut off from etcd, it cannot renew its lease: it fences itself and
	// exits (its container is restarted, still without network, until
	// it is reconnected).
	eventually(t, 45*time.Second, fmt.Sprintf("the disconnected %s fences itself", old), func() string {
		logs, err := c.logs(victim, since)
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(logs, "lease ended") {
			return "its log does not say \"lease ended\" yet: " + lastLines(logs, 3)
		}
		return ""
	})
	eventually(t, 45*time.Second, fmt.Sprintf("the objects of the disconnected %s move elsewhere", old), func() string {
		for _, o := range objects {
			r, err := c.object(o)
			if err != nil {
				return err.Error()
			}
			if r.Record.Owner == old || !r.OwnerAlive {
				return fmt.Sprintf("%s on %s (alive %v)", o, r.Record.Owner, r.OwnerAlive)
			}
		}
		return ""
	})
	for _, o := range objects {
		if r := c.get(t, 1, o); r.Fence.Owner == old {
			t.Errorf("get %s: served by the disconnected %s", o, old)
		}
		c.add(t, 2, o, 1)
	}
	if got := c.modelOf("actor/dcounter/net-d"); got != 21 {
		t.Errorf("actor/dcounter/net-d = %d, want 21 (20 before the disconnect, +1 after)", got)
	}
	t.Logf("%s: %s", victim, c.mustInspect(t, victim))

	reconnect()
	c.waitSteady(t, 3*time.Minute)
	o := c.mustOwners(t)[victim]
	if o.Generation <= gen {
		t.Errorf("%s after the reconnect: generation %d, want > %d (a new owner)", victim, o.Generation, gen)
	}
	vi := nodeIndex(victim)
	for _, obj := range objects {
		c.get(t, vi, obj)
		c.add(t, vi, obj, 1)
	}
	// The other nodes reach it again by its name: a relocation onto it.
	c.relocate(t, 45*time.Second, objects[1], victim)
	if r := c.get(t, 2, objects[1]); r.Fence.Owner.ID != victim || r.Fence.Owner.Generation != o.Generation {
		t.Errorf("get %s after relocating it onto the reconnected %s: served by %s", objects[1], victim, r.Fence.Owner)
	}
}

func (c *cluster) testFinal(t *testing.T) {
	c.waitSteady(t, 90*time.Second)
	objects := c.modelObjects()
	for g := range meshnodes {
		for _, o := range objects {
			c.get(t, g, o)
		}
	}
	t.Logf("%d objects read through each of the 3 nodes, each with its acknowledged value", len(objects))
}
