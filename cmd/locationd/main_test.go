package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshloc/meshloc/internal/etcdtest"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		env    map[string]string
		code   int
		stderr string
	}{
		{[]string{"demo", "x"}, nil, exitUsage, "locationd: usage: locationd demo takes no arguments"},
		{[]string{"--bogus"}, nil, exitUsage, "locationd: usage: unknown flag: --bogus"},
		{[]string{"serve"}, nil, exitUsage, `locationd: usage: locationd takes no arguments, got ["serve"]`},
		{[]string{"--http", "7070"}, nil, exitUsage, `locationd: usage: locationd: invalid config: --http "7070" is not host:port`},
		{nil, map[string]string{"LOCATIOND_PREFIX": "nope"}, exitUsage, "locationd: usage: locationd: invalid config: --prefix/--cluster"},
		{nil, map[string]string{"LOCATIOND_REQUEST_TIMEOUT": "soon"}, exitUsage, `locationd: usage: environment LOCATIOND_REQUEST_TIMEOUT="soon"`},
		{[]string{"--log-level", "loud"}, nil, exitUsage, `locationd: usage: --log-level "loud"`},
		// One set of levels on every binary, and no "defaulting": refused.
		{[]string{"--log-level", "verbose"}, nil, exitUsage, `locationd: usage: --log-level "verbose": logging: unknown level (want debug, info, warn, error or disabled) (see locationd --help)`},
		{[]string{"demo", "--log-level", "trace"}, nil, exitUsage, `locationd: usage: --log-level "trace": logging: unknown level`},
		{[]string{"--log-format", "text"}, nil, exitUsage, `locationd: usage: --log-format "text": logging: unknown format (want json or console)`},
		{[]string{"--etcd-endpoints", "http://a:2379", "--initial-cluster", "m1=http://a:2380"}, nil, exitUsage,
			`locationd: usage: locationd: invalid config: --initial-cluster "m1=http://a:2380": means nothing with --etcd-endpoints`},
		{[]string{"--name", "m9", "--initial-cluster", "m1=http://127.0.0.1:2380"}, nil, exitUsage,
			`locationd: usage: locationd: invalid config: --name "m9": is not a member of --initial-cluster (members: m1)`},
		{[]string{"--initial-cluster", "m1=127.0.0.1:2380"}, nil, exitUsage, `locationd: usage: locationd: invalid config: --initial-cluster "m1=127.0.0.1:2380": member m1`},
		{nil, map[string]string{"LOCATIOND_INITIAL_CLUSTER_STATE": "old"}, exitUsage, `locationd: usage: locationd: invalid config: --initial-cluster-state "old": want new or existing`},
		{[]string{"--http-write-timeout", "5s"}, nil, exitUsage, `locationd: usage: locationd: invalid config: --http-write-timeout "5s": must exceed --request-timeout (5s)`},
		{[]string{"--http-read-header-timeout", "20s"}, nil, exitUsage, `locationd: usage: locationd: invalid config: --http-read-header-timeout "20s": must be positive and at most --http-read-timeout (10s)`},
		{[]string{"--http-max-connections", "0"}, nil, exitUsage, `locationd: usage: locationd: invalid config: --http-max-connections "0": want 1..1048576`},
		{nil, map[string]string{"LOCATIOND_HTTP_MAX_HEADER_BYTES": "64KiB"}, exitUsage, `locationd: usage: environment LOCATIOND_HTTP_MAX_HEADER_BYTES="64KiB"`},
		{nil, map[string]string{"LOCATIOND_HTTP_IDLE_TIMEOUT": "0s"}, exitUsage, `locationd: usage: locationd: invalid config: --http-idle-timeout "0s": must be positive`},
		{[]string{"watch-proxy", "--listen", "0.0.0.0:23790"}, nil, exitUsage, `locationd: usage: fanout: invalid config: --listen "0.0.0.0:23790": not loopback`},
		{[]string{"watch-proxy", "--history-events", "0"}, nil, exitUsage, `locationd: usage: fanout: invalid config: --history-events "0": want 1..10000000`},
		{[]string{"watch-proxy", "x"}, nil, exitUsage, "locationd: usage: locationd watch-proxy takes no arguments"},
	} {
		var out, errb bytes.Buffer
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		code := run(context.Background(), tc.args, &out, &errb, lookup)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if code != tc.code || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.stderr) || strings.Contains(errb.String(), "defaulting") {
			t.Errorf("locationd %v %v: exit %d, stderr %q; want exit %d, stderr %q…", tc.args, tc.env, code, errb.String(), tc.code, tc.stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb, func(string) (string, bool) { return "", false }); code != exitOK || !strings.HasPrefix(out.String(), "locationd ") {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errb.String())
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--help"}, &out, &errb, func(string) (string, bool) { return "", false })
	if code != exitOK || !strings.Contains(out.String(), "--etcd-endpoints") || !strings.Contains(out.String(), "LOCATIOND_") ||
		!strings.Contains(out.String(), "--initial-cluster-state") || !strings.Contains(out.String(), "--http-max-connections") ||
		!strings.Contains(out.String(), "--http-read-timeout") {
		t.Errorf("--help: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// locationd watch-proxy serves the cluster's authority/ keys from the etcd
// it is given: a watch through it sees a record written straight to etcd;
// keys outside the cluster's are not served.
func TestWatchProxy(t *testing.T) {
	srv := etcdtest.Single(t)
	etcd := etcdtest.Client(t, srv.Endpoint())
	addr := fmt.Sprintf("127.0.0.1:%d", etcdtest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"watch-proxy", "--etcd-endpoints", srv.Endpoint(), "--listen", addr, "--http", "", "--cluster", "wp"},
			io.Discard, &errb, func(string) (string, bool) { return "", false })
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("watch-proxy exit %d: %s", code, errb.String())
		}
	}()
	px := etcdtest.Client(t, "http://"+addr)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	wch := px.Watch(wctx, "/meshloc/wp/authority/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("watch through the proxy: %+v %v (%s)", resp, resp.Err(), errb.String())
	}
	if _, err := etcd.Put(ctx, "/meshloc/wp/authority/actor/counter/c1", "x"); err != nil {
		t.Fatal(err)
	}
	if resp := <-wch; len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != "/meshloc/wp/authority/actor/counter/c1" {
		t.Fatalf("through the proxy: %+v %v", resp, resp.Err())
	}
	if resp, ok := <-px.Watch(wctx, "/meshloc/other/authority/", clientv3.WithPrefix()); ok && resp.Err() == nil {
		t.Fatalf("another cluster's keys served: %+v", resp)
	}
}
