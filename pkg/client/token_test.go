package client

import (
	"errors"
	"testing"

	"github.com/meshloc/meshloc/pkg/session"
	"github.com/meshloc/meshloc/pkg/wire"
)

func TestTokenRoundTrip(t *testing.T) {
	tok := Token{Session: session.NewID(), Object: "actor/room/r1", ReceivedPush: 7, LastCall: 3}
	got, err := ParseToken(tok.String())
	if err != nil || got != tok {
		t.Fatalf("ParseToken(String()) = %+v, %v; want %+v", got, err, tok)
	}
	for _, bad := range []string{"", "!!", Token{Session: tok.Session, Object: "../owners"}.String()} {
		if _, err := ParseToken(bad); !errors.Is(err, wire.ErrInvalidArgument) {
			t.Errorf("ParseToken(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// FuzzParseToken: a token is text a user pastes (meshctl session --resume):
// it parses to a token whose text form parses to the same, or is refused
// with ErrInvalidArgument; never a panic.
func FuzzParseToken(f *testing.F) {
	f.Add(Token{Session: session.NewID(), Object: "actor/room/r1", ReceivedPush: 7, LastCall: 3}.String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidArgument) {
				t.Fatalf("ParseToken(%q): untyped error %v", s, err)
			}
			return
		}
		again, err := ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("round trip of %+v: %+v, %v", tok, again, err)
		}
	})
}
