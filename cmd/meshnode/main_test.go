package main

import (
	"bytes"
	"strings"
	"testing"
)

func runArgs(args []string, env map[string]string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return code, out.String(), errb.String()
}

// --version, --help with the environment mirrors, and usage errors (exit
// status 2, nothing started).
func TestCommandLine(t *testing.T) {
	if code, out, _ := runArgs([]string{"--version"}, nil); code != 0 || !strings.HasPrefix(out, "meshnode ") {
		t.Errorf("--version: %d %q", code, out)
	}
	if code, out, _ := runArgs([]string{"--help"}, nil); code != 0 || !strings.Contains(out, "MESHNODE_LEASE_TTL") || !strings.Contains(out, "--lease-ttl") {
		t.Errorf("--help: %d, lists no environment mirror:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--no-such-flag"}, nil, "unknown flag"},
		{[]string{"extra"}, nil, "takes no arguments"},
		{[]string{"--name", "n1", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--name", "n1", "--log-level", "verbose"}, nil, `--log-level "verbose": logging: unknown level (want debug, info, warn, error or disabled)`},
		{[]string{"--name", "n1", "--log-format", "text"}, nil, `--log-format "text": logging: unknown format`},
		{[]string{"-name", "n1"}, nil, "unknown shorthand flag"}, // flags are --name, as on every binary
		{[]string{"--name", "n1"}, map[string]string{"MESHNODE_LEASE_TTL": "soon"}, "MESHNODE_LEASE_TTL"},
		{nil, nil, "--name"}, // required
	} {
		if code, _, errs := runArgs(tc.args, tc.env); code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "defaulting") {
			t.Errorf("%v %v: exit %d, %q; want 2 naming %q", tc.args, tc.env, code, errs, tc.want)
		}
	}
}
