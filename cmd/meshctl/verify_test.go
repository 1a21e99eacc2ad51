package main

import (
	"strings"
	"testing"
)

// Bad verify command lines are usage errors (exit 2) and start nothing.
func TestVerifyUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--duration", "1s"}, "--duration"},
		{[]string{"verify", "--etcd-members", "2"}, "--etcd-members"},
		{[]string{"verify", "--nodes", "1"}, "--nodes"},
		{[]string{"verify", "--workloads", "bank,queue"}, "unknown workload"},
		{[]string{"verify", "--faults", "explode", "--bin-dir", "."}, "--bin-dir"},
		{[]string{"verify", "extra"}, "usage"},
	} {
		r := meshctl(nil, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
