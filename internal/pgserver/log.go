package pgserver

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// LogTail is the last n lines of the log.
func (s *Server) LogTail(n int) string {
	b, err := readTail(s.LogPath(), 64<<10)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (s *Server) withLog(err error) error {
	return fmt.Errorf("%w\n--- last %d lines of %s ---\n%s", err, logTailLines, s.LogPath(), s.LogTail(logTailLines))
}

func (s *Server) logSize() int64 {
	st, err := os.Stat(s.LogPath())
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince is what the log gained after offset off.
func (s *Server) logSince(off int64) string {
	f, err := os.Open(s.LogPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<20))
	return string(b)
}

// readTail is the last n bytes of path, from a line start.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := st.Size() - n
	if off <= 0 {
		return io.ReadAll(f)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, n))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return b, err
}
