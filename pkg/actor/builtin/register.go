package builtin

import (
	"math"

	"github.com/meshloc/meshloc/pkg/actor"
)

// MaxRegisterValue bounds a register's value in bytes.
const MaxRegisterValue = 1 << 20

// registerMaxStateBytes: JSON escapes a byte into at most 6.
const registerMaxStateBytes = 6*MaxRegisterValue + 128

// register is a versioned string (UTF-8), initially "" at version 0. Every
// successful write adds one to the version.
//
//	get            → {"value":s,"version":n}
//	put V          → {"version":n}
//	cas OLD NEW    → {"ok":bool,"value":current,"version":n}
//
// A cas whose OLD is not the current value is an answer (ok:false, with the
// current value), not an error. A write at version math.MaxInt64 (only a
// restored state can be there) is rejected: the version would overflow
// into a state Restore refuses.
type register struct {
	value   string
	version int64
}

type registerState struct {
	V       int    `json:"v"`
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

type registerGet struct {
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

type registerPut struct {
	Version int64 `json:"version"`
}

type registerCAS struct {
	OK      bool   `json:"ok"`
	Value   string `json:"value"`
	Version int64  `json:"version"`
}

func registerValue(what string, b []byte) (string, error) {
	if len(b) > MaxRegisterValue {
		return "", actor.InvalidArgument("%s of %d bytes, limit %d", what, len(b), MaxRegisterValue)
	}
	return text(what, b)
}

// Handle implements actor.Object.
func (r *register) Handle(_ actor.Context, method string, args [][]byte) ([]byte, error) {
	switch method {
	case "get":
		if err := wantArgs(RegisterType, method, args); err != nil {
			return nil, err
		}
		return reply(registerGet{Value: r.value, Version: r.version})
	case "put":
		if err := wantArgs(RegisterType, method, args, "V"); err != nil {
			return nil, err
		}
		v, err := registerValue("V", args[0])
		if err != nil {
			return nil, err
		}
		if err := r.canWrite(); err != nil {
			return nil, err
		}
		r.value, r.version = v, r.version+1
		return reply(registerPut{Version: r.version})
	case "cas":
		if err := wantArgs(RegisterType, method, args, "OLD", "NEW"); err != nil {
			return nil, err
		}
		old, err := registerValue("OLD", args[0])
		if err != nil {
			return nil, err
		}
		v, err := registerValue("NEW", args[1])
		if err != nil {
			return nil, err
		}
		if old != r.value {
			return reply(registerCAS{OK: false, Value: r.value, Version: r.version})
		}
		if err := r.canWrite(); err != nil {
			return nil, err
		}
		r.value, r.version = v, r.version+1
		return reply(registerCAS{OK: true, Value: r.value, Version: r.version})
	}
	return nil, actor.UnknownMethod(RegisterType, method)
}

// canWrite refuses a write whose version would overflow.
func (r *register) canWrite() error {
	if r.version == math.MaxInt64 {
		return actor.Rejected("register at version %d: a write would overflow the version", r.version)
	}
	return nil
}

// Snapshot implements actor.Object.
func (r *register) Snapshot() ([]byte, error) {
	return snapshot(registerState{V: stateVersion, Value: r.value, Version: r.version})
}

// Restore implements actor.Object.
func (r *register) Restore(b []byte) error {
	var s registerState
	if err := restore(RegisterType, b, &s, &s.V); err != nil {
		return err
	}
	if s.Version < 0 || len(s.Value) > MaxRegisterValue || (s.Version == 0 && s.Value != "") {
		return corrupt(RegisterType, "value of %d bytes at version %d", len(s.Value), s.Version)
	}
	r.value, r.version = s.Value, s.Version
	return nil
}
