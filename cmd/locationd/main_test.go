package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
