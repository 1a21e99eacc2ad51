package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/mtls"
)

// One mistake of the files, one answer: a certificate of this cluster
// given with another cluster's CA is a usage error (exit status 2, nothing
// sent) for every command that reads them — locationd's API, a call
// through a node, a call routed from etcd.
func TestWrongCAOneAnswer(t *testing.T) {
	ours, theirs := t.TempDir(), t.TempDir()
	for _, d := range []string{ours, theirs} {
		if _, err := mtls.Init(d, mtls.InitOptions{Nodes: []string{"n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	f := func(dir, name string) string { return filepath.Join(dir, name) }
	tlsArgs := []string{"--cacert", f(theirs, "ca.crt"), "--cert", f(ours, "admin.crt"), "--key", f(ours, "admin.key")}
	etcdArgs := []string{"--etcd-cacert", f(theirs, "ca.crt"), "--etcd-cert", f(ours, "etcd-root.crt"), "--etcd-key", f(ours, "etcd-root.key")}
	want := regexp.MustCompile(`^meshctl: usage: .*does not chain to .*ca\.crt.*$`)
	for name, args := range map[string][]string{
		"locationd": append(append([]string{"--locationd", "https://127.0.0.1:1"}, tlsArgs...), "owners"),
		"node":      append(append([]string{"--node", "127.0.0.1:1"}, tlsArgs...), "call", "actor/counter/x", "get"),
		"etcd":      append(append([]string{"--etcd-endpoints", "https://127.0.0.1:1"}, etcdArgs...), "call", "actor/counter/x", "get"),
	} {
		r := meshctl(nil, args...)
		line := strings.TrimSpace(r.stderr)
		if r.code != 2 || !want.MatchString(line) {
			t.Errorf("%s: exit %d, %q; want exit 2, a usage error naming the CA", name, r.code, line)
		}
	}
}
