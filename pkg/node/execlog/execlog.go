// Package execlog owns a node's execution log (--exec-log): one JSON line
// per real execution of a request, timer tick or answer turn by a hosted
// object, written before the reply leaves, which the verification suite
// reads back to cross-check etcd's history.
package execlog

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/wire"
)

// Log is the node's execution log (Config.ExecLog, --exec-log): one JSON
// line per real execution of a request (or timer tick) by a hosted object,
// read back by internal/verify (ReadExecLogFiles) to cross-check etcd's
// history (docs/design.md §9.1 and §9.2). A line is
//
//	{"owner":"n1","ownerGeneration":7,"object":"actor/counter/c1","objectGeneration":1,"authorityGeneration":2,"op":"0199…","t":1732872000000000000}
//
// or, for a timer tick, "timer":"<name>" instead of "op". A message from
// another object (docs/design.md §13) adds "from":"<sender>" to its line;
// the turn that takes the answer of an Ask at its sender (OnReply) is
// logged with its own operation id and "replyTo":"<message id>". owner and
// ownerGeneration are this process (the owner that executed); the
// generations are the fence the execution ran under, the one its reply
// carries; t is the execution's start, Unix nanoseconds.
//
// Each line is one write(2) on a file opened with O_APPEND, done before the
// reply leaves the node, with no buffering in the process: a SIGKILL can
// lose (or tear) only the line of an execution whose reply never left.
// Requests answered from the de-duplication table and refused requests
// are not logged.
type Log struct {
	path   string
	self   authority.OwnerRef
	log    zerolog.Logger
	errors prometheus.Counter

	mu       sync.Mutex
	f        *os.File
	buf      []byte
	reported bool // a write error was logged already
}

// Open opens (creates) path for appending. A file left ending in a
// torn line (its writer was killed mid-write) gets a newline first, so that
// this life's first line stands alone.
func Open(path string, self authority.OwnerRef, log zerolog.Logger, errs prometheus.Counter) (*Log, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node: --exec-log: %w", err)
	}
	l := &Log{path: path, self: self, log: log, errors: errs, f: f, buf: make([]byte, 0, 256)}
	if torn, err := endsTorn(path); err != nil {
		f.Close()
		return nil, fmt.Errorf("node: --exec-log: %w", err)
	} else if torn {
		log.Warn().Str("path", path).Msg("execution log ends with a torn line (a writer was killed mid-write): terminating it")
		if _, err := f.Write([]byte{'\n'}); err != nil {
			f.Close()
			return nil, fmt.Errorf("node: --exec-log: %w", err)
		}
	}
	return l, nil
}

// endsTorn reports whether the file at path is not empty and does not end
// with a newline.
func endsTorn(path string) (bool, error) {
	r, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	var b [1]byte
	if _, err := r.ReadAt(b[:], st.Size()-1); err != nil && err != io.EOF {
		return false, err
	}
	return b[0] != '\n', nil
}

// Request logs one execution of op by obj under fence f (the object's
// current fence: its caller executes it, so it cannot change meanwhile);
// from is the sender of a message ("" for a call).
func (l *Log) Request(obj string, f authority.Fence, op wire.OperationID, from string, t time.Time) {
	l.write(obj, f, "op", op.String(), "from", from, t)
}

// ReadOnly logs the request op of a durable obj that changed nothing, so
// persisted nothing: its reply is not kept across a sleep or a crash, and
// a retry may run it again (docs/design.md §5a).
func (l *Log) ReadOnly(obj string, f authority.Fence, op wire.OperationID, t time.Time) {
	l.write(obj, f, "op", op.String(), "read", "durable", t)
}

// OnReply logs the OnReply turn op of obj that took message msg's answer.
func (l *Log) OnReply(obj string, f authority.Fence, op, msg wire.OperationID, t time.Time) {
	l.write(obj, f, "op", op.String(), "replyTo", msg.String(), t)
}

// Reminder logs the firing op of obj's reminder: firing is
// "<name>@<seq>@<due ms>", one due time of one reminder, which must
// execute once (under the one operation id every attempt uses).
func (l *Log) Reminder(obj string, f authority.Fence, op wire.OperationID, firing string, t time.Time) {
	l.write(obj, f, "op", op.String(), "reminder", firing, t)
}

// Timer logs one timer tick handled by obj.
func (l *Log) Timer(obj string, f authority.Fence, name string, t time.Time) {
	l.write(obj, f, "timer", name, "", "", t)
}

// write appends one line: what:id, and key:val unless val is empty.
func (l *Log) write(obj string, f authority.Fence, what, id, key, val string, t time.Time) {
	l.line(obj, f, t, func(b []byte) []byte {
		b = append(b, `,"`...)
		b = append(b, what...)
		b = append(b, `":`...)
		b = appendJSONString(b, id)
		if val != "" {
			b = append(b, `,"`...)
			b = append(b, key...)
			b = append(b, `":`...)
			b = appendJSONString(b, val)
		}
		return b
	})
}

// line appends one line: the owner and fence, what body adds, and t.
func (l *Log) line(obj string, f authority.Fence, t time.Time, body func([]byte) []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf[:0]
	b = append(b, `{"owner":`...)
	b = appendJSONString(b, l.self.ID)
	b = append(b, `,"ownerGeneration":`...)
	b = strconv.AppendInt(b, l.self.Generation, 10)
	b = append(b, `,"object":`...)
	b = appendJSONString(b, obj)
	b = append(b, `,"objectGeneration":`...)
	b = strconv.AppendInt(b, f.ObjectGeneration, 10)
	b = append(b, `,"authorityGeneration":`...)
	b = strconv.AppendInt(b, f.AuthorityGeneration, 10)
	b = body(b)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, t.UnixNano(), 10)
	b = append(b, "}\n"...)
	l.buf = b
	if _, err := l.f.Write(b); err != nil {
		l.errors.Inc()
		if !l.reported {
			l.reported = true
			l.log.Error().Err(err).Str("path", l.path).Msg("execution log write failed (further failures are only counted: meshloc_exec_log_errors_total)")
		}
	}
}

// Claim logs a new owner's claim of obj's durable state under f (a load
// from its state store): the state version it claimed at, the write
// sequence it loaded (0: none), whether the object was fresh, and the
// deleted generation whose state it may not load. With Wrote it lets the
// verification suite audit the store: no write under a fence after a
// newer fence's claim, no claim that missed a write before it.
func (l *Log) Claim(obj string, f authority.Fence, version int64, seq uint64, fresh bool, deleted int64, t time.Time) {
	l.line(obj, f, t, func(b []byte) []byte {
		b = append(b, `,"state":"claim","version":`...)
		b = strconv.AppendInt(b, version, 10)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, seq, 10)
		if fresh {
			b = append(b, `,"fresh":true`...)
		}
		if deleted > 0 {
			b = append(b, `,"deleted":`...)
			b = strconv.AppendInt(b, deleted, 10)
		}
		return b
	})
}

// Wrote logs a durable write of obj under f: the state version it made
// and its write sequence.
func (l *Log) Wrote(obj string, f authority.Fence, version int64, seq uint64, t time.Time) {
	l.line(obj, f, t, func(b []byte) []byte {
		b = append(b, `,"state":"write","version":`...)
		b = strconv.AppendInt(b, version, 10)
		b = append(b, `,"seq":`...)
		return strconv.AppendUint(b, seq, 10)
	})
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// appendJSONString appends s as a JSON string: names are plain ASCII in
// practice; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
