package cliutil

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestEnvName(t *testing.T) {
	if got := EnvName("LOCATIOND_", "etcd-endpoints"); got != "LOCATIOND_ETCD_ENDPOINTS" {
		t.Fatal(got)
	}
}

func TestApplyEnv(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	a := fs.String("alpha", "a0", "")
	b := fs.String("beta-two", "b0", "")
	n := fs.Int("n", 1, "")
	var l []string
	fs.Var(NewList(&l), "list", "")
	if err := fs.Parse([]string{"--alpha=flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"X_ALPHA": "env", "X_BETA_TWO": "env", "X_LIST": "p, q,,r"}
	if err := ApplyEnv(fs, "X_", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if *a != "flag" || *b != "env" || *n != 1 || !slices.Equal(l, []string{"p", "q", "r"}) {
		t.Fatalf("alpha=%q beta=%q n=%d list=%q", *a, *b, *n, l)
	}
	env["X_N"] = "many"
	if err := ApplyEnv(fs, "X_", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil {
		t.Fatal("X_N=many accepted")
	}
}

func TestListReplaces(t *testing.T) {
	var l []string
	v := NewList(&l)
	_ = v.Set("a,b")
	_ = v.Set("c")
	if v.String() != "c" {
		t.Fatal(v.String())
	}
	_ = v.Set("")
	if len(l) != 0 {
		t.Fatal(l)
	}
}
