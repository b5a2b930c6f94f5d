package config_test

import (
	"testing"
	"time"

	"github.com/syncd/syncd/config"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"7d", 7 * 24 * time.Hour, "7d"},
		{"168h", 7 * 24 * time.Hour, "7d"},
		{"168h0m0s", 7 * 24 * time.Hour, "7d"},
		{"1d12h", 36 * time.Hour, "1d12h"},
		{"36h", 36 * time.Hour, "1d12h"},
		{"90s", 90 * time.Second, "1m30s"},
		{"1h30m", 90 * time.Minute, "1h30m"},
		{"2h", 2 * time.Hour, "2h"},
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"0s", 0, "0s"},
		{"9223372036854775807ns", time.Duration(1<<63 - 1), "106751d23h47m16.854775807s"},
	} {
		got, err := config.ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if s := config.FormatDuration(got); s != tt.out {
			t.Errorf("FormatDuration(%v) = %q, want %q", got, s, tt.out)
		}
		if back, err := config.ParseDuration(tt.out); err != nil || back != got {
			t.Errorf("%q does not read back: %v, %v", tt.out, back, err)
		}
	}
	for _, bad := range []string{"", "d", "7", "-1d", "1.5d", "7days", "xd", "1d-1h", "106752d"} {
		if d, err := config.ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", bad, d)
		}
	}
}
