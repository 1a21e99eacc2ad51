package actor

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/wire"
)

func msg(parent wire.OperationID, i uint32, to string, args ...string) OutMessage {
	m := OutMessage{ID: MessageID(parent, i), To: to, Method: "hop"}
	for _, a := range args {
		m.Args = append(m.Args, []byte(a))
	}
	return m
}

func sampleOutbox() *Outbox {
	p := opID(t0, 1)
	o := &Outbox{}
	if err := o.Add([]OutMessage{msg(p, 0, "actor/bank/b2", "t1", "5"), msg(p, 1, "actor/bank/b3"), {ID: MessageID(p, 2), To: "actor/bank/b2", Method: "credit", Args: [][]byte{{}}, Ask: true}}, 0, 0); err != nil {
		panic(err)
	}
	return o
}

func TestOutboxAddRemoveBounds(t *testing.T) {
	p := opID(t0, 1)
	var o Outbox
	if err := o.Add([]OutMessage{msg(p, 0, "actor/bank/b2"), msg(p, 1, "actor/bank/b3")}, 2, 0); err != nil {
		t.Fatal(err)
	}
	// All or nothing: one more does not fit the count bound.
	if err := o.Add([]OutMessage{msg(p, 2, "actor/bank/b2")}, 2, 0); !errors.Is(err, ErrOutboxFull) || o.Len() != 2 {
		t.Fatalf("over the count bound: %v, len %d", err, o.Len())
	}
	if err := o.Add([]OutMessage{msg(p, 2, "actor/bank/b2", string(make([]byte, 200)))}, 0, o.Bytes()+100); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("over the byte bound: %v", err)
	}
	if err := o.Add([]OutMessage{msg(p, 0, "actor/bank/b4")}, 0, 0); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("an id twice: %v", err)
	}
	if err := o.Add([]OutMessage{{ID: MessageID(p, 9), To: "group/g", Method: "m"}}, 0, 0); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("a group destination: %v", err)
	}
	b := o.Bytes()
	m, ok := o.Remove(MessageID(p, 0))
	if !ok || m.To != "actor/bank/b2" || o.Len() != 1 || o.Bytes() >= b {
		t.Fatalf("remove: %v %v len %d bytes %d", m, ok, o.Len(), o.Bytes())
	}
	if _, ok := o.Remove(MessageID(p, 0)); ok {
		t.Fatal("removed twice")
	}
	o.Remove(MessageID(p, 1))
	if o.Len() != 0 || o.Bytes() != 0 || o.Encode() != nil {
		t.Fatalf("empty: len %d bytes %d enc %x", o.Len(), o.Bytes(), o.Encode())
	}
	var nilBox *Outbox
	if nilBox.Len() != 0 || nilBox.Encode() != nil || nilBox.Has(p) {
		t.Fatal("nil outbox not empty")
	}
}

func TestOutboxOldest(t *testing.T) {
	var o Outbox
	if _, ok := o.Oldest(); ok {
		t.Fatal("empty outbox has an oldest")
	}
	late, early := opID(t0.Add(time.Minute), 1), opID(t0, 2)
	_ = o.Add([]OutMessage{msg(late, 0, "actor/bank/b2"), msg(early, 0, "actor/bank/b3")}, 0, 0)
	if at, ok := o.Oldest(); !ok || !at.Equal(t0) {
		t.Fatalf("oldest %v %v", at, ok)
	}
}

func TestOutboxEncodeRoundTrip(t *testing.T) {
	o := sampleOutbox()
	b := o.Encode()
	got, err := DecodeOutbox(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Entries(), o.Entries()) || got.Bytes() != o.Bytes() || !bytes.Equal(got.Encode(), b) {
		t.Fatalf("round trip:\n%+v\n%+v", got.Entries(), o.Entries())
	}
	if c := o.Clone(); !reflect.DeepEqual(c.Entries(), o.Entries()) {
		t.Fatal("clone differs")
	}
	if e, err := DecodeOutbox(nil); e != nil || err != nil {
		t.Fatalf("no bytes: %v %v", e, err)
	}
}

func TestDecodeOutboxRefuses(t *testing.T) {
	good := sampleOutbox().Encode()
	withByte := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	cases := map[string][]byte{
		"magic":      withByte(0, 'X'),
		"version":    withByte(1, 9),
		"empty":      {outboxMagic, outboxVersion, 0},
		"count":      {outboxMagic, outboxVersion, 0xff, 0xff, 0x03},
		"truncated":  good[:len(good)-1],
		"trailing":   append(bytes.Clone(good), 0),
		"flags":      withByte(2+1+wire.IDLen, 7),
		"zero id":    append(append([]byte{outboxMagic, outboxVersion, 1}, make([]byte, 16)...), good[3+16:]...),
		"not canon.": {outboxMagic, outboxVersion, 0x81, 0x00},
	}
	// A message id twice.
	p := opID(t0, 1)
	dup := &Outbox{entries: []OutMessage{msg(p, 0, "actor/bank/b2"), msg(p, 0, "actor/bank/b3")}}
	cases["id twice"] = dup.Encode()
	bad := &Outbox{entries: []OutMessage{{ID: MessageID(p, 0), To: "actor/bank/", Method: "m"}}}
	cases["destination"] = bad.Encode()
	for name, b := range cases {
		if o, err := DecodeOutbox(b); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: %v, %v", name, o, err)
		}
	}
}

func FuzzDecodeOutbox(f *testing.F) {
	f.Add(sampleOutbox().Encode())
	f.Add([]byte{outboxMagic, outboxVersion, 1})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOutbox(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptState) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if e := o.Encode(); !bytes.Equal(e, b) {
			t.Fatalf("encode(decode(b)) != b:\n%x\n%x", e, b)
		}
		// A decoded outbox can be delivered and emptied without panicking.
		var d Delivery
		for o.Len() > 0 {
			send, expired, _ := d.Next(o, t0, 0, 0)
			if len(send)+len(expired) == 0 {
				t.Fatalf("%d messages and nothing to send", o.Len())
			}
			for _, m := range append(send, expired...) {
				d.Applied(m.ID)
				if _, ok := o.Remove(m.ID); !ok {
					t.Fatalf("message %s not in the outbox", m.ID)
				}
			}
		}
		if o.Bytes() != 0 {
			t.Fatalf("empty outbox counts %d bytes", o.Bytes())
		}
	})
}
