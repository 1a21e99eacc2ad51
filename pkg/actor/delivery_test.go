package actor

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// TestDeliveryTranscripts runs testdata/delivery/*.txt: an Outbox and its
// Delivery driven step by step; they are the specification of delivery.go's
// rules (`go test ./pkg/actor/ -run Delivery -rewrite` regenerates them).
//
// Commands (times are milliseconds after t0; messages are named m1, m2, …
// in the order recorded; destinations are actor/bank/<to>):
//
//	send to=B [n=K] [ask] [at=MS]   record K messages to B (made at MS)
//	next now=MS [max=N] [giveup=MS] what Delivery.Next says
//	result m=mI code=NAME now=MS    the answer of one send (NAME: ok, unavailable, …)
//	apply m=mI                      the sender's turn applied mI's answer
//	reset                           the object was sealed, reopened or restored
//
// Every step prints what it returned, then the outbox.
func TestDeliveryTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/delivery", func(t *testing.T, path string) {
		var o Outbox
		var d Delivery
		names := map[wire.OperationID]string{}
		ids := map[string]wire.OperationID{}
		seq := uint32(0)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			var out strings.Builder
			arg := func(k string) string {
				for _, a := range td.CmdArgs {
					if a.Key == k {
						if len(a.Vals) == 0 {
							return "true"
						}
						return a.Vals[0]
					}
				}
				return ""
			}
			num := func(k string) int {
				v := arg(k)
				if v == "" {
					return 0
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					td.Fatalf(t, "%s=%q: %v", k, v, err)
				}
				return n
			}
			at := func(k string) time.Time { return t0.Add(time.Duration(num(k)) * time.Millisecond) }
			name := func(m OutMessage) string { return names[m.ID] + "→" + strings.TrimPrefix(m.To, "actor/bank/") }
			switch td.Cmd {
			case "send":
				n := max(num("n"), 1)
				var ms []OutMessage
				for range n {
					seq++
					m := OutMessage{ID: MessageID(opID(at("at"), seq), 0), To: "actor/bank/" + arg("to"), Method: "hop", Ask: arg("ask") != ""}
					names[m.ID] = fmt.Sprintf("m%d", seq)
					ids[names[m.ID]] = m.ID
					ms = append(ms, m)
				}
				if err := o.Add(ms, 0, 0); err != nil {
					fmt.Fprintf(&out, "error: %v\n", err)
				}
			case "next":
				send, expired, wake := d.Next(&o, at("now"), num("max"), time.Duration(num("giveup"))*time.Millisecond)
				for _, m := range send {
					fmt.Fprintf(&out, "send %s (attempt %d)\n", name(m), d.Attempts(m.ID))
				}
				for _, m := range expired {
					fmt.Fprintf(&out, "expired %s\n", name(m))
				}
				if !wake.IsZero() {
					fmt.Fprintf(&out, "wake at %d\n", wake.Sub(t0).Milliseconds())
				}
				if len(send)+len(expired) == 0 && wake.IsZero() {
					out.WriteString("nothing\n")
				}
			case "result":
				id, ok := ids[arg("m")]
				if !ok {
					td.Fatalf(t, "no message %s", arg("m"))
				}
				code, ok := pb.Code_value["CODE_"+strings.ToUpper(arg("code"))]
				if !ok {
					td.Fatalf(t, "no code %s", arg("code"))
				}
				fmt.Fprintf(&out, "%s\n", d.Result(id, pb.Code(code), at("now")))
			case "apply":
				id := ids[arg("m")]
				d.Applied(id)
				if _, ok := o.Remove(id); !ok {
					out.WriteString("not in the outbox\n")
				}
			case "reset":
				d.Reset()
			default:
				td.Fatalf(t, "unknown command %s", td.Cmd)
			}
			var box []string
			for _, m := range o.Entries() {
				box = append(box, name(m))
			}
			fmt.Fprintf(&out, "outbox: %s\n", strings.Join(box, " "))
			return out.String()
		})
	})
}

// OutcomeOf is the one table of what an answer means to a sender.
func TestOutcomeOf(t *testing.T) {
	for c := range pb.Code_name {
		code := pb.Code(c)
		got := OutcomeOf(code)
		want := OutcomeAnswered
		switch code {
		case pb.Code_CODE_OPERATION_EXPIRED, pb.Code_CODE_INVALID_OPERATION_ID:
			want = OutcomeRefused
		case pb.Code_CODE_UNSPECIFIED, pb.Code_CODE_STATE_LOST, pb.Code_CODE_DEADLINE_EXCEEDED, pb.Code_CODE_RESOURCE_EXHAUSTED,
			pb.Code_CODE_DATA_LOST, pb.Code_CODE_UNKNOWN_TYPE:
			want = OutcomeRetry
		}
		if wire.Retryable(code) {
			want = OutcomeRetry // what a caller may retry, a sender retries
		}
		if got != want {
			t.Errorf("%s: %s, want %s", code, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[uint32]time.Duration{0: MessageBackoffMin, 1: MessageBackoffMin, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 20: MessageBackoffMax} {
		if got := backoff(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
}
