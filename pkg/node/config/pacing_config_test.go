package config_test

import (
	"testing"
	"time"
)

// The pacing's flags and their environment mirrors: ranges checked, 0
// turns pacing off.
func TestConfigPacing(t *testing.T) {
	for _, c := range []struct {
		args   []string
		env    map[string]string
		bad    string
		target time.Duration
		min    float64
	}{
		{nil, nil, "", 250 * time.Microsecond, 10},
		{[]string{"--background-latency-target", "1ms", "--background-min-rate", "2.5"}, nil, "", time.Millisecond, 2.5},
		{[]string{"--background-latency-target", "0"}, nil, "", 0, 10},
		{nil, map[string]string{"MESHNODE_BACKGROUND_LATENCY_TARGET": "500us", "MESHNODE_BACKGROUND_MIN_RATE": "1"}, "", 500 * time.Microsecond, 1},
		{[]string{"--background-latency-target", "1us"}, nil, "--background-latency-target", 0, 0},
		{[]string{"--background-latency-target", "2s"}, nil, "--background-latency-target", 0, 0},
		{[]string{"--background-latency-target", "-1ms"}, nil, "--background-latency-target", 0, 0},
		{[]string{"--background-min-rate", "0"}, nil, "--background-min-rate", 0, 0},
		{[]string{"--background-min-rate", "NaN"}, nil, "--background-min-rate", 0, 0},
		{nil, map[string]string{"MESHNODE_BACKGROUND_MIN_RATE": "2e6"}, "--background-min-rate", 0, 0},
	} {
		cfg, valid := parseConfig(t, c.args, c.env, c.bad)
		if valid && (cfg.BackgroundLatencyTarget != c.target || cfg.BackgroundMinRate != c.min) {
			t.Errorf("%v %v: target %v min %v, want %v %v", c.args, c.env, cfg.BackgroundLatencyTarget, cfg.BackgroundMinRate, c.target, c.min)
		}
	}
}
