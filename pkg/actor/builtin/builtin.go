// Package builtin holds the object types every meshnode can host
// (docs/design.md §10). They exist for tests, the demo and benchmarks, and as
// worked examples of the actor API.
//
//	counter   add N                    {"value":v}
//	          get                      {"value":v}
//	register  get                      {"value":s,"version":n}
//	          put V                    {"version":n}
//	          cas OLD NEW              {"ok":bool,"value":current,"version":n}
//	list      append V                 {"length":n}
//	          read                     {"items":[...]}
//	bank      transfer FROM TO AMOUNT TXID   {"ok":true}
//	          read                     {"balances":{"a0":100,...},"ledger":[...],"total":800}
//	          chain TXID AMOUNT BANK…  {"ok":true}: AMOUNT leaves a0 by message, bank to bank
//	          hop TXID AMOUNT [BANK…]  {"ok":true}: the message (credits a0, passes it on)
//	blob      fill BYTES [SEED]        {"size":n,"sha256":hex}
//	          hash                     {"size":n,"sha256":hex}
//	ticker    start PERIOD_MS [skip|fireonce|catchup] [MAXCATCHUP]
//	          read, stop               {"count":n,"last":i,"ok":bool}
//	room      join NAME                {"members":[...]}
//	          say TEXT                 {"n":k}, published to every session: {"n":k,"text":...}
//	          history N                {"messages":[...]}
//
// Each type also exists as a durable variant named with the prefix "d"
// (dcounter, dregister, dlist, dbank, dblob, dticker: DurableTypes): the
// same methods and replies, with every acknowledged change persisted in
// etcd before the reply (docs/design.md §5a).
//
// Arguments are the strings of `meshctl call OBJ METHOD [ARG…]`; replies are
// compact JSON objects. Every handler is deterministic given the state and
// the arguments (blob's content too: it is derived from the size and a
// seed), so a retried or relocated request means the same thing everywhere.
// Snapshots are versioned, canonical JSON (blob: the raw bytes); Restore
// refuses anything else with an error wrapping actor.ErrCorruptState.
//
// Errors: a malformed argument wraps actor.ErrInvalidArgument, an unknown
// method actor.ErrUnknownMethod, and a refusal that depends on the state
// (insufficient funds, a duplicate transfer id, a full list, an overflow)
// actor.ErrRejected. A cas that does not match is an answer, not an error.
//
// The types hold every bound they rely on (list and ledger sizes, blob
// size) and declare their largest snapshot in actor.Type.MaxStateBytes.
package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/meshloc/meshloc/pkg/actor"
)

// Type names.
const (
	CounterType  = "counter"
	RegisterType = "register"
	ListType     = "list"
	BankType     = "bank"
	BlobType     = "blob"
	TickerType   = "ticker"
)

// Types returns the built-in types.
func Types() []actor.Type {
	return []actor.Type{
		{Name: CounterType, New: func() actor.Object { return &counter{} }, Methods: []string{"add", "get", "delete", "remind", "unremind"}},
		{Name: RegisterType, New: func() actor.Object { return &register{} }, MaxStateBytes: registerMaxStateBytes, Methods: []string{"get", "put", "cas"}},
		{Name: ListType, New: func() actor.Object { return &list{} }, MaxStateBytes: listMaxStateBytes, Methods: []string{"append", "read"}},
		{Name: BankType, New: func() actor.Object { return newBank() }, MaxStateBytes: bankMaxStateBytes, Methods: []string{"transfer", "read", "chain", "hop"}},
		{Name: BlobType, New: func() actor.Object { return &blob{} }, MaxStateBytes: MaxBlobBytes, Methods: []string{"fill", "hash", "size", "write"}},
		{Name: TickerType, New: func() actor.Object { return &ticker{} }, Methods: []string{"start", "read", "stop"}},
		{Name: RoomType, New: func() actor.Object { return &room{} }, Methods: []string{"join", "say", "history"}},
	}
}

// Register adds every built-in type to r, memory and durable (DurableTypes).
func Register(r *actor.Registry) error {
	for _, t := range append(Types(), DurableTypes()...) {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// stateVersion is the version of every JSON snapshot of this package.
const stateVersion = 1

// reply is compact JSON with no HTML escaping (a CLI prints it as is).
func reply(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("builtin: encode reply: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// snapshot encodes a state the same way as a reply.
func snapshot(v any) ([]byte, error) { return reply(v) }

// restore decodes a JSON snapshot strictly: it must be exactly what
// snapshot writes for the value it decodes to (known fields, all present, in
// order, no duplicates, no trailing data) and of the current version.
func restore(typ string, b []byte, v any, version *int) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", actor.ErrCorruptState, typ, err)
	}
	if *version != stateVersion {
		return fmt.Errorf("%w: %s: state version %d, want %d", actor.ErrCorruptState, typ, *version, stateVersion)
	}
	if again, err := snapshot(v); err != nil || !bytes.Equal(again, b) {
		return fmt.Errorf("%w: %s: not a canonical snapshot", actor.ErrCorruptState, typ)
	}
	return nil
}

func corrupt(typ, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", actor.ErrCorruptState, typ, fmt.Sprintf(format, args...))
}

// wantArgs checks the argument count of a method.
func wantArgs(typ, method string, args [][]byte, usage ...string) error {
	if len(args) != len(usage) {
		return actor.InvalidArgument("%s %s takes %d argument(s) %v, got %d", typ, method, len(usage), usage, len(args))
	}
	return nil
}

func parseInt64(what string, b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, actor.InvalidArgument("%s %q is not a decimal int64", what, b)
	}
	return n, nil
}

func text(what string, b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", actor.InvalidArgument("%s is not valid UTF-8", what)
	}
	return string(b), nil
}
