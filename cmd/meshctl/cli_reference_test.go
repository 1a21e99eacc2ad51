package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/meshloc/meshloc/internal/refdoc"
)

// docs/reference/cli/ holds this command's reference as cobra generates it
// from the command itself (make docs writes it; this fails when it is
// stale).
func TestCLIReference(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	if err := refdoc.CLI(newRoot(io.Discard, noEnv), filepath.Join("..", "..", "docs", "reference", "cli")); err != nil {
		t.Fatal(err)
	}
}
