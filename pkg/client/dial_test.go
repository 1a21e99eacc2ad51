package client

import (
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// A connection closed before the node answered is a TLS mismatch only when
// the address answers in the other protocol: a proxy whose node is gone
// closes too, and its calls must be retried, not refused for good.
func TestDialProblemAsksBeforeItBlamesTLS(t *testing.T) {
	closed := grpcstatus.Error(codes.Unavailable, "connection error: desc = \"error reading server preface: EOF\"; connection closed before server preface received")
	tlsEOF := grpcstatus.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: tls: EOF\"")
	notTLS := grpcstatus.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: tls: first record does not look like a TLS handshake\"")
	refused := grpcstatus.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"")
	for _, c := range []struct {
		name    string
		err     error
		secured bool
		answer  tlsAnswer
		want    error // nil: no problem named, the call is retried
	}{
		{"plaintext client, TLS node", closed, false, answersTLS, ErrTLSMismatch},
		{"plaintext client, proxy of a dead node", closed, false, answersNothing, nil},
		{"plaintext client, plaintext node closing", closed, false, answersPlain, nil},
		{"secured client, plaintext node", notTLS, true, answersNothing, ErrTLSMismatch},
		{"secured client, plaintext node closing", tlsEOF, true, answersPlain, ErrTLSMismatch},
		{"secured client, proxy of a dead node", tlsEOF, true, answersNothing, nil},
		{"refused", refused, false, answersNothing, ErrNoNode},
		{"other", grpcstatus.Error(codes.Internal, "x"), false, answersTLS, nil},
	} {
		probed := false
		got := dialProblemProbed("127.0.0.1:1", c.err, c.secured, func(string) tlsAnswer { probed = true; return c.answer })
		switch {
		case c.want == nil && got != nil:
			t.Errorf("%s: %v, want no problem named", c.name, got)
		case c.want != nil && !errors.Is(got, c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if probed && (c.err == notTLS || c.err == refused) {
			t.Errorf("%s: probed, though the error says it all", c.name)
		}
	}
}

// The probe itself: a listener that closes every connection answers
// nothing (it is not a TLS server).
func TestProbeTLSOfAClosingListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if a := probeTLS(l.Addr().String()); a != answersNothing {
		t.Fatalf("a closing listener answers %v, want nothing", a)
	}
}
