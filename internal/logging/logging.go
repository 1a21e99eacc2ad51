// Package logging is the one way the meshloc binaries make their zerolog
// logger: the same levels (--log-level), the same formats (--log-format
// json or console) and millisecond timestamps in every one.
//
// It sets no zerolog global: the timestamp is added by a hook of the
// logger it returns, so loggers of embedders and tests are untouched.
package logging

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// Levels are the log levels every binary accepts, least severe first.
var Levels = []string{"debug", "info", "warn", "error", "disabled"}

// Formats are the log formats: json (one object a line, the default) and
// console (aligned, readable text).
var Formats = []string{"json", "console"}

// TimeFormat is the layout of every log line's "time": RFC 3339 in UTC
// with milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Errors of the log flags.
var (
	// ErrLevel: --log-level names no level of Levels.
	ErrLevel = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "logging: unknown level (want debug, info, warn, error or disabled)")
	// ErrFormat: --log-format names no format of Formats.
	ErrFormat = wire.Sentinel(pb.Code_CODE_INVALID_ARGUMENT, "logging: unknown format (want json or console)")
)

// ParseLevel is the zerolog level of one of Levels ("" is info). Anything
// else is ErrLevel: never a silent default.
func ParseLevel(s string) (zerolog.Level, error) {
	switch s {
	case "debug":
		return zerolog.DebugLevel, nil
	case "info", "":
		return zerolog.InfoLevel, nil
	case "warn":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	case "disabled":
		return zerolog.Disabled, nil
	}
	return zerolog.NoLevel, fmt.Errorf("--log-level %q: %w", s, ErrLevel)
}

// CheckFormat refuses a format not in Formats ("" is json).
func CheckFormat(s string) error {
	switch s {
	case "json", "console", "":
		return nil
	}
	return fmt.Errorf("--log-format %q: %w", s, ErrFormat)
}

// New is the logger of a binary: lines to w at level and above, in format,
// each with a "time" in TimeFormat and, if service is not empty, a
// "service".
func New(w io.Writer, level, format, service string) (zerolog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), err
	}
	if err := CheckFormat(format); err != nil {
		return zerolog.Nop(), err
	}
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}
	}
	c := zerolog.New(w).Level(lvl).Hook(timestamp{}).With()
	if service != "" {
		c = c.Str("service", service)
	}
	return c.Logger(), nil
}

// timestamp stamps a line as it is written (zerolog's Timestamp would use
// the package-global TimeFieldFormat, whole seconds by default).
type timestamp struct{}

func (timestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(TimeFormat))
}
