package execlog

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/wire"
)

// written is what a Log of owner writes for the executions w makes.
func written(t *testing.T, owner authority.OwnerRef, w func(*Log)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "exec.log")
	l, err := Open(path, owner, zerolog.Nop(), prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	w(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fence(og, ag int64) authority.Fence {
	return authority.Fence{ObjectGeneration: og, AuthorityGeneration: ag}
}

// What the writer writes, the reader reads back, aggregated per owner and
// fence in the order each fence first appears.
func TestReadWhatIsWritten(t *testing.T) {
	const c = "actor/counter/c"
	at := time.Unix(1732872000, 0)
	ops := make([]wire.OperationID, 6)
	for i := range ops {
		ops[i] = wire.NewOperationID()
	}
	n1 := authority.OwnerRef{ID: "n1", Generation: 5}
	log := written(t, n1, func(l *Log) {
		l.Request(c, fence(1, 1), ops[0], "", at)
		l.Request(c, fence(1, 1), ops[1], "actor/counter/sender", at)
		l.Timer("actor/ticker/t", fence(1, 1), "tick", at)
		l.Request(c, fence(1, 3), ops[2], "", at) // moved away and back
		l.OnReply(c, fence(1, 1), ops[3], ops[4], at)
	}) + "\n" + // a blank line is skipped
		written(t, authority.OwnerRef{ID: "n1", Generation: 9}, func(l *Log) { l.Request(c, fence(2, 5), ops[5], "", at) }) // the next life
	logs, st, err := Read(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Entry{
		"n1@5": {
			{Object: c, ObjectGeneration: 1, AuthorityGeneration: 1, Requests: 3, OperationIDs: []string{ops[0].String(), ops[1].String(), ops[3].String()},
				Messages: map[string]string{ops[1].String(): "actor/counter/sender"}, Replies: map[string]string{ops[3].String(): ops[4].String()}},
			{Object: "actor/ticker/t", ObjectGeneration: 1, AuthorityGeneration: 1, TimerTicks: 1},
			{Object: c, ObjectGeneration: 1, AuthorityGeneration: 3, Requests: 1, OperationIDs: []string{ops[2].String()}},
		},
		"n1@9": {{Object: c, ObjectGeneration: 2, AuthorityGeneration: 5, Requests: 1, OperationIDs: []string{ops[5].String()}}},
	}
	if !reflect.DeepEqual(logs, want) {
		t.Fatalf("got %+v\nwant %+v", logs, want)
	}
	if st != (Stats{Files: 1, Lines: 6, Requests: 5, TimerTicks: 1, Messages: 1}) {
		t.Fatalf("stats %+v", st)
	}
}

// A node killed in the middle of a write leaves a partial last line: it is
// skipped and counted, not an error.
func TestReadTornLastLine(t *testing.T) {
	at := time.Unix(1732872000, 0)
	two := written(t, authority.OwnerRef{ID: "n1", Generation: 5}, func(l *Log) {
		l.Request("actor/counter/c", fence(1, 1), wire.NewOperationID(), "", at)
		l.Request("actor/counter/c", fence(1, 1), wire.NewOperationID(), "", at)
	})
	full := two[:strings.IndexByte(two, '\n')+1]
	next := two[len(full):]
	for _, cut := range []int{1, 20, len(next) - 2, len(next) - 1} {
		logs, st, err := Read(strings.NewReader(full + next[:cut]))
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if st.TornLines != 1 || st.Lines != 1 || len(logs["n1@5"]) != 1 || logs["n1@5"][0].Requests != 1 {
			t.Fatalf("cut at %d: %+v %+v", cut, st, logs)
		}
	}
	// The node restarted: it terminated the torn line and appended its own.
	restarted := full + next[:30] + "\n" + written(t, authority.OwnerRef{ID: "n1", Generation: 9}, func(l *Log) {
		l.Request("actor/counter/c", fence(2, 2), wire.NewOperationID(), "", at)
	})
	logs, st, err := Read(strings.NewReader(restarted))
	if err != nil {
		t.Fatal(err)
	}
	if st.TornLines != 1 || st.Lines != 2 || len(logs) != 2 {
		t.Fatalf("%+v %+v", st, logs)
	}
}

// A malformed line anywhere but at the end is an error naming its line.
func TestReadMalformed(t *testing.T) {
	good := written(t, authority.OwnerRef{ID: "n1", Generation: 5}, func(l *Log) {
		l.Request("actor/counter/c", fence(1, 1), wire.NewOperationID(), "", time.Unix(1, 0))
	})
	for name, tc := range map[string]struct {
		log, line string
	}{
		"garbage":         {good + "not json\n" + good, "line 2"},
		"no fence":        {good + good + `{"owner":"n1","ownerGeneration":5,"object":"actor/counter/c","op":"b","t":1}` + "\n", "line 3"},
		"op and timer":    {`{"owner":"n1","ownerGeneration":5,"object":"o","objectGeneration":1,"authorityGeneration":1,"op":"a","timer":"x","t":1}` + "\n", "line 1"},
		"trailing data":   {good + strings.TrimSuffix(good, "\n") + "}\n", "line 2"},
		"cut, same owner": {good + good[:25] + "\n" + good, "line 2"},
	} {
		_, _, err := Read(strings.NewReader(tc.log))
		if err == nil || !strings.Contains(err.Error(), tc.line) {
			t.Errorf("%s: error %v, want one naming %s", name, err, tc.line)
		}
	}
}
