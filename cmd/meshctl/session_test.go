package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// meshctlIn runs meshctl with stdin.
func meshctlIn(stdin string, args ...string) result {
	var out, errb bytes.Buffer
	root := newRoot(&out, func(string) (string, bool) { return "", false })
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	code := exitOK
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(&errb, errorLine(err))
		code = exitError
		if _, ok := err.(usageError); ok {
			code = exitUsage
		}
	}
	return result{code, out.String(), errb.String()}
}

var tokenLine = regexp.MustCompile(`(?m)^token (\S+)$`)

func TestSession(t *testing.T) {
	_, n := oneNode(t)
	// --wait is how long meshctl goes on printing pushes after stdin ended
	// and none came: long enough that a loaded machine still delivers them
	// (300 ms was not, in CI).
	node := []string{"--node", n.Address(), "--wait", "3s"}
	r := meshctlIn("join alice\n# a comment\n\nsay \"hello world\"\nsay again\nnope\n", append(node, "session", "actor/room/lobby")...)
	if r.code != exitError || !strings.HasPrefix(r.stderr, "meshctl: unknown_method: 1 call(s) failed; the first, call 4 (nope): ") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		`(?m)^opened actor/room/lobby at \S+ token \S+$`,
		`(?m)^reply 1 join \{.*\} \(node n1\)$`,
		`(?m)^reply 2 say \{"n":1\} \(node n1\)$`,
		`(?m)^push 1 \{"n":1,"text":"hello world"\}$`,
		`(?m)^push 2 \{"n":2,"text":"again"\}$`,
		`(?m)^error 4 nope unknown_method: .+$`,
		`(?m)^token \S+$`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("output lacks %s:\n%s", want, r.stdout)
		}
	}
	tok := tokenLine.FindStringSubmatch(r.stdout)[1]

	// Resumed: the pushes after the last one printed, the calls numbered on.
	r = meshctlIn("say third\n", append(node, "-o", "json", "session", "--resume", tok)...)
	if r.code != exitOK {
		t.Fatalf("resume: exit %d, stderr %q\n%s", r.code, r.stderr, r.stdout)
	}
	var pushes []uint64
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var sl sessionLine
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if sl.Push != nil {
			pushes = append(pushes, sl.Push.Seq)
		}
	}
	if fmt.Sprint(pushes) != "[3]" {
		t.Errorf("pushes after the resume %v:\n%s", pushes, r.stdout)
	}

	if r := meshctlIn("", append(node, "session", "--resume", "AAAA")...); r.code != exitUsage || !strings.Contains(r.stderr, "malformed session token") {
		t.Errorf("a malformed token: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{
		{"session"},
		{"session", "actor/room/x", "--resume", tok},
		{"session", "--resume", "!!"},
		{"session", "nope"},
	} {
		if r := meshctlIn("", append(node, bad...)...); r.code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
	if r := meshctlIn("say \"open\n", append(node, "session", "actor/room/q")...); r.code != exitUsage || !strings.Contains(r.stderr, "quoted") {
		t.Errorf("a bad quote: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSplitArgs(t *testing.T) {
	for in, want := range map[string]string{
		`say hi`:               `[say hi]`,
		`say  "a b"  c`:        `[say a b c]`,
		`say "tab\there" "\""`: "[say tab\there \"]",
	} {
		got, err := splitArgs(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("splitArgs(%q) = %v %v, want %s", in, got, err, want)
		}
	}
	if _, err := splitArgs(`say "x`); err == nil {
		t.Error("unterminated quote accepted")
	}
}
