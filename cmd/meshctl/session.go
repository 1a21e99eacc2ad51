package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshloc/meshloc/pkg/api"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/wire"
)

// sessionLine is one line of -o json output: exactly one field is set.
type sessionLine struct {
	Opened *sessionOpened `json:"opened,omitempty"`
	Reply  *sessionReply  `json:"reply,omitempty"`
	Error  *sessionError  `json:"error,omitempty"`
	Push   *sessionPush   `json:"push,omitempty"`
	Token  string         `json:"token,omitempty"`
}

type sessionOpened struct {
	Object  string `json:"object"`
	Gateway string `json:"gateway"`
	Token   string `json:"token"`
}

type sessionReply struct {
	Call    int             `json:"call"`
	Method  string          `json:"method"`
	Payload json.RawMessage `json:"payload"`
	Node    string          `json:"node"`
}

type sessionError struct {
	Call    int    `json:"call"`
	Method  string `json:"method"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

type sessionPush struct {
	Seq     uint64          `json:"seq"`
	Payload json.RawMessage `json:"payload"`
}

func sessionCmd(g *globals, out io.Writer) *cobra.Command {
	var resume string
	var wait time.Duration
	var follow bool
	cmd := &cobra.Command{
		Use:   "session [OBJECT]",
		Short: "open a session on an object: calls from stdin, its pushes as they come",
		Long: `Open a session on OBJECT through the gateway --node (or, with
--etcd-endpoints, any serving node), read calls from stdin, one per line,
"METHOD [ARG...]", and print each reply and every push of the object, in
order, each once, while the object moves between nodes and the gateway
changes. Arguments are separated by spaces; one in double quotes may hold
spaces ("hello world", Go escapes). Empty lines and lines starting with #
are skipped.

Table output:
  opened <object> at <gateway> token <TOKEN>
  reply <n> <method> <payload JSON> (node <owner>)
  error <n> <method> <code>: <message>
  push <seq> <payload>
  token <TOKEN>
-o json prints one JSON object per line with one of the fields opened,
reply, error, push, token.

After stdin ends, pushes are printed until none came for --wait (or, with
--follow, until interrupted); then the last line is the session's token:
"meshctl session --resume TOKEN" opens it again (any node, any process) and
gets the pushes after the last one printed. A call that fails is printed as
an error line and the session goes on; the exit status is then 1. A session
that ends (its object's state was lost, or it could not be resumed) ends
the command with its error. Try it on the built-in room type:
  printf 'join alice\nsay hello\n' | meshctl session actor/room/lobby`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 || (len(args) == 0) == (resume == "") {
				return usageError{err: fmt.Errorf("%s: give OBJECT or --resume TOKEN", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var tok *client.Token
			var object string
			if resume != "" {
				t, err := client.ParseToken(resume)
				if err != nil {
					return badArgument("--resume", err)
				}
				if _, err := parseObject("--resume", t.Object); err != nil {
					return err
				}
				tok, object = &t, t.Object
			} else {
				obj, err := parseObject("OBJECT", args[0])
				if err != nil {
					return err
				}
				object = obj.String()
			}
			if wait < 0 {
				return usageError{err: fmt.Errorf("--wait %s must not be negative", wait)}
			}
			ctx := cmd.Context()
			c, err := g.objectClient(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			octx, cancel := context.WithTimeout(ctx, g.timeout)
			var s *client.Session
			if tok != nil {
				s, err = c.ResumeSession(octx, *tok)
			} else {
				s, err = c.OpenSession(octx, object)
			}
			cancel()
			if err != nil {
				return err
			}
			defer s.Close()
			return runSession(ctx, g, s, object, cmd.InOrStdin(), out, wait, follow)
		},
	}
	cmd.Flags().StringVar(&resume, "resume", "", "resume the session of this token (printed by an earlier meshctl session)")
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "after stdin ends, print pushes until none came for this long")
	cmd.Flags().BoolVar(&follow, "follow", false, "after stdin ends, print pushes until interrupted")
	return cmd
}

// sessionPrinter writes the lines of a session, from the call loop and the
// push loop.
type sessionPrinter struct {
	mu   sync.Mutex
	out  io.Writer
	json bool
	last time.Time // the last push
}

func (p *sessionPrinter) print(l sessionLine, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.Push != nil {
		p.last = time.Now()
	}
	if p.json {
		b, _ := json.Marshal(l)
		text = string(b)
	}
	fmt.Fprintln(p.out, text)
}

func (p *sessionPrinter) lastPush() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// jsonPayload is a payload as JSON: itself when it is JSON, else a string.
func jsonPayload(b []byte) json.RawMessage {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return json.RawMessage("null")
	case json.Valid(b):
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			return c.Bytes()
		}
	}
	q, _ := json.Marshal(string(b))
	return q
}

func runSession(ctx context.Context, g *globals, s *client.Session, object string, in io.Reader, out io.Writer, wait time.Duration, follow bool) error {
	p := &sessionPrinter{out: out, json: g.output == "json", last: time.Now()}
	p.print(sessionLine{Opened: &sessionOpened{Object: object, Gateway: s.Gateway(), Token: s.Token().String()}},
		fmt.Sprintf("opened %s at %s token %s", object, s.Gateway(), s.Token()))
	rctx, stopRecv := context.WithCancel(ctx)
	recvDone := make(chan error, 1)
	go func() {
		for {
			m, err := s.Recv(rctx)
			if err != nil {
				recvDone <- err
				return
			}
			pl := jsonPayload(m.Payload)
			p.print(sessionLine{Push: &sessionPush{Seq: m.Seq, Payload: pl}}, fmt.Sprintf("push %d %s", m.Seq, pl))
		}
	}()
	callErr := sessionCalls(ctx, g, s, in, p)
	if s.Err() == nil && ctx.Err() == nil {
		// A call that failed leaves the session open: the pushes of the
		// calls before it are still printed (the exit status says it).
		if err := awaitPushes(ctx, s, p, wait, follow); callErr == nil {
			callErr = err
		}
	}
	stopRecv()
	if err := <-recvDone; err != nil && !errors.Is(err, context.Canceled) && callErr == nil {
		callErr = err
	}
	if s.Err() == nil {
		t := s.Token().String()
		p.print(sessionLine{Token: t}, "token "+t)
	}
	return callErr
}

// sessionCalls runs the calls of in, one per line, in order.
func sessionCalls(ctx context.Context, g *globals, s *client.Session, in io.Reader, p *sessionPrinter) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), wire.MaxArgsBytes+4096)
	failed := 0
	var first *api.Error // the first failed call's code and message
	for n := 1; sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words, err := splitArgs(line)
		if err != nil {
			return badArgument(fmt.Sprintf("stdin line %q", line), err)
		}
		cctx, cancel := context.WithTimeout(ctx, g.timeout)
		r, err := s.Call(cctx, words[0], words[1:]...)
		cancel()
		if err != nil {
			if s.Err() != nil || ctx.Err() != nil {
				return err // the session ended
			}
			var we *wire.Error
			code, msg := "unavailable", err.Error()
			if errors.As(err, &we) {
				code, msg = wire.CodeName(we.Code), we.Message
			}
			p.print(sessionLine{Error: &sessionError{Call: n, Method: words[0], Code: code, Message: msg}},
				fmt.Sprintf("error %d %s %s: %s", n, words[0], code, msg))
			if first == nil {
				first = &api.Error{Code: code, Message: fmt.Sprintf("call %d (%s): %s", n, words[0], msg)}
			}
			failed++
			n++
			continue
		}
		pl := jsonPayload(r.Payload)
		p.print(sessionLine{Reply: &sessionReply{Call: n, Method: words[0], Payload: pl, Node: r.Node}},
			fmt.Sprintf("reply %d %s %s (node %s)", n, words[0], pl, r.Node))
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if failed > 0 {
		// The session itself went well: the exit status says a call failed,
		// with the first one's own code (not internal).
		return &api.Error{Code: first.Code, Message: fmt.Sprintf("%d call(s) failed; the first, %s", failed, first.Message)}
	}
	return nil
}

// awaitPushes waits, after the calls, for the pushes still coming.
func awaitPushes(ctx context.Context, s *client.Session, p *sessionPrinter, wait time.Duration, follow bool) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if follow {
				return nil
			}
			return ctx.Err()
		case <-tick.C:
		}
		if err := s.Err(); err != nil {
			return err
		}
		if !follow && time.Since(p.lastPush()) >= wait {
			return nil
		}
	}
}

// splitArgs splits a line into words at spaces; a word in double quotes
// (Go escapes) may hold spaces.
func splitArgs(line string) ([]string, error) {
	var out []string
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimLeft(rest, " \t") {
		if rest[0] != '"' {
			i := strings.IndexAny(rest, " \t")
			if i < 0 {
				i = len(rest)
			}
			out = append(out, rest[:i])
			rest = rest[i:]
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, fmt.Errorf("unterminated or bad quoted argument: %s", rest)
		}
		w, _ := strconv.Unquote(q)
		out = append(out, w)
		rest = rest[len(q):]
	}
	return out, nil
}
