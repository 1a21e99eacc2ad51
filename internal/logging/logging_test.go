package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLevelsAndFormats(t *testing.T) {
	for _, l := range Levels {
		if _, err := ParseLevel(l); err != nil {
			t.Errorf("level %q: %v", l, err)
		}
	}
	for _, bad := range []string{"verbose", "INFO", "trace", "fatal", "panic", "1", " info"} {
		_, err := ParseLevel(bad)
		if !errors.Is(err, ErrLevel) || strings.Contains(err.Error(), "defaulting") {
			t.Errorf("level %q: %v, want ErrLevel without a default", bad, err)
		}
	}
	for _, bad := range []string{"text", "JSON", "pretty"} {
		if err := CheckFormat(bad); !errors.Is(err, ErrFormat) {
			t.Errorf("format %q: %v", bad, err)
		}
	}
}

func TestJSONLinesHaveMilliseconds(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, "info", "json", "meshnode")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Str("k", "v").Msg("shown")
	var line struct {
		Time, Service, Level, Message, K string
	}
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %q", err, b.String())
	}
	if _, err := time.Parse(TimeFormat, line.Time); err != nil || len(line.Time) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("time %q: %v", line.Time, err)
	}
	if line.Service != "meshnode" || line.Level != "info" || line.Message != "shown" || line.K != "v" {
		t.Errorf("line %+v", line)
	}
}

func TestConsole(t *testing.T) {
	var b bytes.Buffer
	log, err := New(&b, "debug", "console", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Str("object", "actor/counter/c1").Msg("hello")
	s := b.String()
	// 15:04:05.000 DBG hello object=actor/counter/c1
	if len(s) < 13 || s[2] != ':' || s[8] != '.' || !strings.Contains(s, "DBG hello object=actor/counter/c1") {
		t.Errorf("console line %q", s)
	}
}
