package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/verify"
	"github.com/meshloc/meshloc/pkg/client"
)

// model is one run of the scale model.
type model struct {
	cfg      config
	t0       time.Time
	ld       *proc
	etcdURL  string
	ldHTTP   string
	ec       *clientv3.Client
	nodes    []*meshNode
	cas      float64 // etcd CAS/s, 64 clients (the baseline)
	failures []string
}

// meshNode is one meshnode process and the flags it restarts with.
type meshNode struct {
	name, addr, http, execLog string
	p                         *proc
}

func (m *model) run(ctx context.Context) error {
	m.t0 = time.Now()
	c := m.cfg
	m.say("work directory %s; %d objects over %d nodes", c.dir, c.objects, c.nodes)
	if err := m.startLocationd(ctx); err != nil {
		return err
	}
	for i := range c.nodes {
		if err := m.startNode(ctx, fmt.Sprintf("n%d", i+1), true); err != nil {
			return err
		}
	}
	if err := m.baseline(ctx); err != nil {
		return err
	}
	cl, err := client.New(ctx, client.Config{Etcd: m.ec, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := m.activate(ctx, cl); err != nil {
		return err
	}
	m.memory(ctx, "after the activations")

	ld := newLoad(cl, c.workers, c.per)
	lctx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	loadDone.Go(func() { ld.run(lctx) })
	for _, nd := range m.nodes {
		if err := m.restart(ctx, nd); err != nil {
			stopLoad()
			loadDone.Wait()
			return err
		}
	}
	m.memory(ctx, "after the rolling restart")
	if err := m.killOne(ctx); err != nil {
		stopLoad()
		loadDone.Wait()
		return err
	}
	time.Sleep(5 * time.Second) // the load meets the recovered objects
	stopLoad()
	loadDone.Wait()
	m.etcdSize(ctx)

	lost, dup, err := ld.check(ctx)
	if err != nil {
		return err
	}
	m.say("load: %d adds acknowledged, %d failed, %d without an answer, %d losses declared (state_lost) on %d counters; lost %d, duplicated %d",
		ld.ok.Load(), ld.failed.Load(), ld.unknown.Load(), ld.lostDeclared.Load(), len(ld.counters), lost, dup)
	if lost > 0 || dup > 0 {
		m.failures = append(m.failures, fmt.Sprintf("%d counters lost acknowledged adds, %d ran one twice", lost, dup))
	}
	m.execLogs(ctx)
	if len(m.failures) > 0 {
		return fmt.Errorf("%d checks failed: %s", len(m.failures), strings.Join(m.failures, "; "))
	}
	return nil
}

func (m *model) startLocationd(ctx context.Context) error {
	var err error
	addrs := make([]string, 3)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return err
		}
	}
	m.etcdURL, m.ldHTTP = "http://"+addrs[0], addrs[2]
	m.ld, err = start(m.cfg.dir, "locationd", m.cfg.binary("locationd"), "--data-dir", filepath.Join(m.cfg.dir, "locationd"),
		"--listen-client", m.etcdURL, "--listen-peer", "http://"+addrs[1], "--http", m.ldHTTP, "--recover-orphans")
	if err != nil {
		return err
	}
	if err := waitUntil(ctx, time.Minute, "locationd ready", func() bool { _, err := metric(ctx, m.ldHTTP, "meshloc_locationd_controller_leader"); return err == nil }); err != nil {
		return fmt.Errorf("%w\n%s", err, m.ld.tail(20))
	}
	m.ec, err = clientv3.New(clientv3.Config{Endpoints: []string{m.etcdURL}, DialTimeout: 5 * time.Second})
	return err
}

// startNode starts (or starts again) a meshnode and waits until it
// serves; it reports how long that took and the process's RSS then.
func (m *model) startNode(ctx context.Context, name string, first bool) error {
	var nd *meshNode
	for _, x := range m.nodes {
		if x.name == name {
			nd = x
		}
	}
	if nd == nil {
		nd = &meshNode{name: name, execLog: filepath.Join(m.cfg.dir, name+".exec.jsonl")}
		var err error
		if nd.addr, err = freeAddr(); err != nil {
			return err
		}
		if nd.http, err = freeAddr(); err != nil {
			return err
		}
		m.nodes = append(m.nodes, nd)
	}
	t0 := time.Now()
	var err error
	nd.p, err = start(m.cfg.dir, name, m.cfg.binary("meshnode"), "--name", name, "--etcd-endpoints", m.etcdURL,
		"--listen", nd.addr, "--http", nd.http, "--exec-log", nd.execLog)
	if err != nil {
		return err
	}
	err = waitUntil(ctx, 5*time.Minute, name+" serving", func() bool {
		v, err := metric(ctx, nd.http, "meshloc_hosted_objects")
		return err == nil && v >= 0 && serving(ctx, m.ec, name)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, nd.p.tail(20))
	}
	if !first {
		m.say("%s joined the cluster's records and serves after %.2f s; RSS %.0f MiB", name, time.Since(t0).Seconds(), float64(nd.p.rss())/(1<<20))
	}
	return nil
}

// serving reports whether the owner key of name says serving.
func serving(ctx context.Context, ec *clientv3.Client, name string) bool {
	r, err := ec.Get(ctx, "/meshloc/default/owners/"+name)
	if err != nil || len(r.Kvs) == 0 {
		return false
	}
	var d struct {
		State string `json:"state"`
	}
	return json.Unmarshal(r.Kvs[0].Value, &d) == nil && d.State == "serving"
}

// baseline measures etcd's CAS rate with 64 clients, each on its own key.
func (m *model) baseline(ctx context.Context) error {
	const clients, window = 64, 5 * time.Second
	var total atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	start := time.Now()
	for g := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("/scale-cas/%d", g)
			resp, err := m.ec.Put(ctx, key, "0")
			if err != nil {
				first.CompareAndSwap(nil, err)
				return
			}
			rev := resp.Header.Revision
			for time.Since(start) < window {
				tr, err := m.ec.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, "x")).Commit()
				if err != nil || !tr.Succeeded {
					first.CompareAndSwap(nil, fmt.Errorf("CAS baseline: %v", err))
					return
				}
				rev = tr.Header.Revision
				total.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	m.cas = float64(total.Load()) / time.Since(start).Seconds()
	m.say("baseline: etcd CAS/s, 64 clients: %.0f/s", m.cas)
	return nil
}

// activate makes the model's counters live, 128 first calls in flight.
func (m *model) activate(ctx context.Context, cl *client.Client) error {
	t0 := time.Now()
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= m.cfg.objects {
					return
				}
				if _, err := cl.Call(ctx, "actor/counter/m"+strconv.Itoa(i), "add", "1"); err != nil {
					first.CompareAndSwap(nil, err)
				}
				if i > 0 && i%100_000 == 0 {
					m.say("activated %d", i)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	rate := float64(m.cfg.objects) / time.Since(t0).Seconds()
	m.say("figure: first-call activations: %d in %.1f s, %.0f/s = %.2f× etcd CAS/s (target ≥ 0.4×)", m.cfg.objects, time.Since(t0).Seconds(), rate, rate/m.cas)
	return nil
}

// restart is one step of the rolling restart: SIGTERM drains the node (its
// report must say everything moved), then it starts again with the same
// flags and joins.
func (m *model) restart(ctx context.Context, nd *meshNode) error {
	hosted, _ := metric(ctx, nd.http, "meshloc_hosted_objects")
	t0 := time.Now()
	if err := nd.p.term(30 * time.Minute); err != nil {
		m.failures = append(m.failures, fmt.Sprintf("%s: drain on SIGTERM: %v", nd.name, err))
	}
	line := nd.p.lastLine(`"message":"drained"`)
	var rep struct {
		Moved, Failed int
		DurationMs    float64
		EndedEarly    string
	}
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return fmt.Errorf("%s logged no drain report: %v\n%s", nd.name, err, nd.p.tail(20))
	}
	rate := float64(rep.Moved) / (rep.DurationMs / 1000)
	m.say("figure: drain of %s (%0.f objects hosted) on SIGTERM: moved %d, failed %d in %.1f s: %.0f objects/s = %.2f× etcd CAS/s (target ≥ 1×); process gone after %.1f s",
		nd.name, hosted, rep.Moved, rep.Failed, rep.DurationMs/1000, rate, rate/m.cas, time.Since(t0).Seconds())
	if rep.Failed > 0 || rep.EndedEarly != "" {
		m.failures = append(m.failures, fmt.Sprintf("%s's drain left %d objects (%s)", nd.name, rep.Failed, rep.EndedEarly))
	}
	return m.startNode(ctx, nd.name, false)
}

// killOne kills the node holding most objects (kill -9) and waits until
// the recovery controller recovered every orphan.
func (m *model) killOne(ctx context.Context) error {
	var victim *meshNode
	most := -1.0
	for _, nd := range m.nodes {
		if v, err := metric(ctx, nd.http, "meshloc_hosted_objects"); err == nil && v > most {
			victim, most = nd, v
		}
	}
	if victim == nil {
		return errors.New("no node to kill")
	}
	m.say("kill -9 of %s (%.0f objects hosted)", victim.name, most)
	t0 := time.Now()
	victim.p.kill()
	var seen float64
	err := waitUntil(ctx, 30*time.Minute, "every orphan recovered", func() bool {
		v, err := metric(ctx, m.ldHTTP, "meshloc_locationd_orphaned_objects")
		seen = max(seen, v)
		return err == nil && v == 0 && time.Since(t0) > 10*time.Second
	})
	if err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	m.say("figure: recovery of %s's %.0f objects after kill -9: %.1f s from the kill (its lease TTL included): %.0f objects/s = %.2f× etcd CAS/s (target ≥ 0.5×)",
		victim.name, most, el, most/el, most/el/m.cas)
	return m.startNode(ctx, victim.name, false)
}

// memory prints each node's RSS per object hosted.
func (m *model) memory(ctx context.Context, when string) {
	for _, nd := range m.nodes {
		h, _ := metric(ctx, nd.http, "meshloc_hosted_objects")
		rss := float64(nd.p.rss())
		per := 0.0
		if h > 0 {
			per = rss / h / 1024
		}
		m.say("memory %s: %s hosts %.0f objects, RSS %.0f MiB (%.2f KiB per object hosted, its cache of every record included)", when, nd.name, h, rss/(1<<20), per)
	}
}

// etcdSize prints etcd's database size and what of it is in use.
func (m *model) etcdSize(ctx context.Context) {
	st, err := m.ec.Status(ctx, m.etcdURL)
	if err != nil {
		m.say("etcd status: %v", err)
		return
	}
	m.say("figure: etcd at revision %d: database %.1f MiB, in use %.1f MiB", st.Header.Revision, float64(st.DbSize)/(1<<20), float64(st.DbSizeInUse)/(1<<20))
}

// execLogs checks the nodes' execution logs: no operation ran twice, no
// fence was served by two owners.
func (m *model) execLogs(ctx context.Context) {
	var paths []string
	for _, nd := range m.nodes {
		paths = append(paths, nd.execLog)
	}
	logs, err := verify.ExecLogFiles(paths).ExecLogs(ctx)
	if err != nil {
		m.failures = append(m.failures, "execution logs: "+err.Error())
		return
	}
	// Without an audit of etcd's history (the model's etcd compacts), an
	// operation that ran again under a larger object generation is taken
	// for what the model makes: a retry after the kill -9 whose owner died
	// with the first execution (its loss declared, state_lost). Anything
	// else executed twice, or under one fence by two owners, is a failure.
	c := verify.CheckExecLogs(logs, nil)
	again, twice := 0, 0
	for _, v := range c.Violations {
		switch {
		case v.Check == "executed-twice" && strings.Contains(v.Detail, "no audit shows"):
			again++
		case v.Check == "executed-twice":
			twice++
			if twice <= 3 {
				m.say("executed twice: %s", v.Detail)
			}
		}
	}
	m.say("execution logs: %d entries, %d operations; executed twice %d, again after a declared loss %d, two-owner windows %d",
		c.Entries, c.Operations, twice, again, c.TwoOwnerWindows)
	if twice > 0 || c.TwoOwnerWindows > 0 {
		m.failures = append(m.failures, fmt.Sprintf("execution logs: %d executed twice, %d two-owner windows", twice, c.TwoOwnerWindows))
	}
}

func (m *model) close() {
	for _, nd := range m.nodes {
		if nd.p != nil && nd.p.alive() {
			_ = nd.p.term(2 * time.Minute)
		}
	}
	if m.ec != nil {
		m.ec.Close()
	}
	if m.ld != nil && m.ld.alive() {
		_ = m.ld.term(time.Minute)
	}
}
