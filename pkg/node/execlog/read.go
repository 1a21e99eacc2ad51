package execlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Reading the log back: each line checked, aggregated per owner
// ("id@generation": a restarted node is another owner) and fence, a line
// torn by a killed writer told from a malformed one.

// Entry is the lines of one owner's execution log under one fence,
// aggregated: the node executed requests on an object under this fence.
type Entry struct {
	Object              string `json:"object"`
	ObjectGeneration    int64  `json:"objectGeneration"`
	AuthorityGeneration int64  `json:"authorityGeneration"`
	// Requests executed under the fence (0: not counted).
	Requests int64 `json:"requests,omitempty"`
	// OperationIDs executed under the fence, when the node logs them, once
	// per execution: each must appear once in one entry of one node only (no
	// request executed twice, but after a declared loss: the verification
	// suite checks it).
	OperationIDs []string `json:"operationIds,omitempty"`
	// TimerTicks handled under the fence (they count for the single-owner
	// check, and carry no operation id).
	TimerTicks int64 `json:"timerTicks,omitempty"`
	// Messages are the executions (among OperationIDs) of messages from
	// other objects: operation id → sender (docs/design.md §13).
	Messages map[string]string `json:"messages,omitempty"`
	// Replies are the OnReply turns (among OperationIDs): operation id →
	// the id of the message whose answer they took.
	Replies map[string]string `json:"replies,omitempty"`
	// Reminders are the reminder firings (among OperationIDs): operation
	// id → "<name>@<seq>@<due ms>".
	Reminders map[string]string `json:"reminders,omitempty"`
	// Reads are the executions (among OperationIDs) of durable objects'
	// requests that changed nothing (Log.ReadOnly): one may run again.
	Reads map[string]bool `json:"reads,omitempty"`
	// States are the claims and writes of the object's durable state under
	// the fence (Log.Claim, Log.Wrote), in the order logged.
	States []StateEvent `json:"states,omitempty"`
}

// StateEvent is one claim or write of a durable object's state.
type StateEvent struct {
	Kind    string `json:"kind"` // "claim" or "write"
	Version int64  `json:"version"`
	Seq     uint64 `json:"seq"`
	Fresh   bool   `json:"fresh,omitempty"`
	Deleted int64  `json:"deleted,omitempty"`
}

// Line is one line of a meshnode's execution log (--exec-log): one
// execution of a request (Op) or of a timer tick (Timer) by Owner@
// OwnerGeneration under the fence (Object, ObjectGeneration,
// AuthorityGeneration); T is the execution's start, Unix nanoseconds.
type Line struct {
	Owner               string `json:"owner"`
	OwnerGeneration     int64  `json:"ownerGeneration"`
	Object              string `json:"object"`
	ObjectGeneration    int64  `json:"objectGeneration"`
	AuthorityGeneration int64  `json:"authorityGeneration"`
	Op                  string `json:"op,omitempty"`
	Timer               string `json:"timer,omitempty"`
	// From names the sender of a message execution; ReplyTo the message
	// whose answer an OnReply turn took (both with Op).
	From    string `json:"from,omitempty"`
	ReplyTo string `json:"replyTo,omitempty"`
	// Reminder is the firing a reminder turn ran, "<name>@<seq>@<due ms>"
	// (with Op).
	Reminder string `json:"reminder,omitempty"`
	// Read is "durable" for a durable object's request that changed
	// nothing (Log.ReadOnly; with Op).
	Read string `json:"read,omitempty"`
	// State is "claim" or "write" (Log.Claim, Log.Wrote; neither op nor
	// timer), with Version, Seq and, for a claim, Fresh and Deleted.
	State   string `json:"state,omitempty"`
	Version int64  `json:"version,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Fresh   bool   `json:"fresh,omitempty"`
	Deleted int64  `json:"deleted,omitempty"`
	T       int64  `json:"t"`
}

// OwnerKey is the owner that executed: "id@generation".
func (l Line) OwnerKey() string { return fmt.Sprintf("%s@%d", l.Owner, l.OwnerGeneration) }

func (l Line) validate() error {
	switch {
	case l.Owner == "" || l.OwnerGeneration <= 0:
		return errors.New("no owner or owner generation")
	case l.Object == "" || l.ObjectGeneration <= 0 || l.AuthorityGeneration <= 0:
		return errors.New("no object, object generation or authority generation")
	case l.State != "":
		if l.Op != "" || l.Timer != "" || l.State != "claim" && l.State != "write" || l.Version < 0 || l.Deleted < 0 ||
			l.State == "write" && (l.Fresh || l.Deleted != 0) {
			return errors.New(`state is "claim" or "write", without op or timer`)
		}
		return nil
	case (l.Op == "") == (l.Timer == ""):
		return errors.New("want exactly one of op, timer and state")
	case (l.From != "" || l.ReplyTo != "" || l.Reminder != "") && l.Op == "":
		return errors.New("from, replyTo or reminder without op")
	case (l.From != "") && (l.ReplyTo != "" || l.Reminder != "") || l.ReplyTo != "" && l.Reminder != "":
		return errors.New("more than one of from, replyTo and reminder")
	case l.Read != "" && (l.Read != "durable" || l.Op == "" || l.From != "" || l.ReplyTo != "" || l.Reminder != ""):
		return errors.New(`read is "durable", of a request only`)
	}
	return nil
}

// Stats describes what the reader read.
type Stats struct {
	Files      int   `json:"files"`
	Lines      int   `json:"lines"`
	Requests   int64 `json:"requests"`
	TimerTicks int64 `json:"timerTicks"`
	// Messages: executions of messages from other objects (among Requests).
	Messages int64 `json:"messages"`
	// TornLines: partial lines skipped, written by a node killed in the
	// middle of the write (its reply never left): at the end of a file, or
	// in the middle when a restarted node terminated it and appended its own.
	TornLines int `json:"tornLines"`
}

// fenceKey is the fence an execution ran under.
type fenceKey struct {
	object                                string
	objectGeneration, authorityGeneration int64
}

// execAgg aggregates lines into entries per owner and fence, in the order
// each fence first appears.
type execAgg struct {
	logs  map[string][]Entry
	at    map[string]map[fenceKey]int
	stats Stats
}

func newExecAgg() *execAgg {
	return &execAgg{logs: map[string][]Entry{}, at: map[string]map[fenceKey]int{}}
}

func (a *execAgg) add(l Line) {
	owner := l.OwnerKey()
	k := fenceKey{object: l.Object, objectGeneration: l.ObjectGeneration, authorityGeneration: l.AuthorityGeneration}
	idx, ok := a.at[owner]
	if !ok {
		idx = map[fenceKey]int{}
		a.at[owner] = idx
	}
	i, ok := idx[k]
	if !ok {
		i = len(a.logs[owner])
		idx[k] = i
		a.logs[owner] = append(a.logs[owner], Entry{Object: l.Object, ObjectGeneration: l.ObjectGeneration, AuthorityGeneration: l.AuthorityGeneration})
	}
	e := &a.logs[owner][i]
	a.stats.Lines++
	if l.State != "" {
		e.States = append(e.States, StateEvent{Kind: l.State, Version: l.Version, Seq: l.Seq, Fresh: l.Fresh, Deleted: l.Deleted})
		return
	}
	if l.Timer != "" {
		e.TimerTicks++
		a.stats.TimerTicks++
		return
	}
	e.Requests++
	e.OperationIDs = append(e.OperationIDs, l.Op)
	a.stats.Requests++
	switch {
	case l.From != "":
		if e.Messages == nil {
			e.Messages = map[string]string{}
		}
		e.Messages[l.Op] = l.From
		a.stats.Messages++
	case l.ReplyTo != "":
		if e.Replies == nil {
			e.Replies = map[string]string{}
		}
		e.Replies[l.Op] = l.ReplyTo
	case l.Reminder != "":
		if e.Reminders == nil {
			e.Reminders = map[string]string{}
		}
		e.Reminders[l.Op] = l.Reminder
	case l.Read != "":
		if e.Reads == nil {
			e.Reads = map[string]bool{}
		}
		e.Reads[l.Op] = true
	}
}

// read adds the lines of one log. A partial last line (no newline: its
// writer was killed mid-write) is skipped and counted. A partial line
// in the middle (a JSON value cut short) is skipped and counted too, only
// when the lines around it come from different owner lives (a restarted
// node terminated its predecessor's torn line). Any other malformed line is
// an error naming its line number.
func (a *execAgg) read(r io.Reader, name string) error {
	br := bufio.NewReader(r)
	var lastOwner string
	tornAt, tornAfter := 0, "" // a torn line in the middle, and the owner before it
	for no := 1; ; no++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s: line %d: %w", name, no, err)
		}
		if err == io.EOF {
			if len(bytes.TrimSpace(raw)) > 0 {
				a.stats.TornLines++
			}
			return nil
		}
		line := bytes.TrimSpace(raw)
		if len(line) == 0 {
			continue
		}
		var l Line
		dec := json.NewDecoder(bytes.NewReader(line))
		derr := dec.Decode(&l)
		if errors.Is(derr, io.ErrUnexpectedEOF) {
			if tornAt != 0 {
				return fmt.Errorf("%s: line %d: malformed (cut short; line %d was too)", name, no, tornAt)
			}
			tornAt, tornAfter = no, lastOwner
			a.stats.TornLines++
			continue
		}
		if derr == nil {
			if _, terr := dec.Token(); terr != io.EOF {
				derr = errors.New("data after the JSON object")
			}
		}
		if derr == nil {
			derr = l.validate()
		}
		if derr != nil {
			return fmt.Errorf("%s: line %d: malformed: %v", name, no, derr)
		}
		if tornAt != 0 {
			if tornAfter != "" && tornAfter == l.OwnerKey() {
				return fmt.Errorf("%s: line %d: malformed (cut short, yet %s wrote on after it)", name, tornAt, tornAfter)
			}
			tornAt = 0
		}
		lastOwner = l.OwnerKey()
		a.add(l)
	}
}

// Read reads one node's execution log (the lines pkg/node
// writes with --exec-log) and aggregates it per owner ("id@generation")
// and fence.
func Read(r io.Reader) (map[string][]Entry, Stats, error) {
	a := newExecAgg()
	a.stats.Files = 1
	if err := a.read(r, "execution log"); err != nil {
		return nil, a.stats, err
	}
	return a.logs, a.stats, nil
}

// ReadFiles reads and aggregates the execution logs of several
// nodes (a restarted node's lives share one file; each is its own owner).
func ReadFiles(paths ...string) (map[string][]Entry, Stats, error) {
	a := newExecAgg()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, a.stats, fmt.Errorf("execution log: %w", err)
		}
		err = a.read(f, p)
		f.Close()
		if err != nil {
			return nil, a.stats, err
		}
		a.stats.Files++
	}
	return a.logs, a.stats, nil
}
