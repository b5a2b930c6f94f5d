package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// ParseDuration reads a duration as syncd's settings and commands take
// it: a Go duration ("90s", "36h", "1h30m") that may start with whole
// days ("7d", "1d12h"). "168h" and "7d" are the same week.
func ParseDuration(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || int64(n) > math.MaxInt64/int64(day) {
			return 0, fmt.Errorf("want a duration like 30s, 24h or 7d, got %q", s)
		}
		days, s = time.Duration(n)*day, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || (days > 0 && (d < 0 || d > math.MaxInt64-days)) {
		return 0, fmt.Errorf("want a duration like 30s, 24h or 7d, got %q", s)
	}
	return days + d, nil
}

// FormatDuration writes d the one way syncd prints durations, which
// ParseDuration reads back: whole days as days, no zero units ("7d",
// "1d12h", "1h30m", "90ms", "0s").
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	var b strings.Builder
	if d >= day {
		fmt.Fprintf(&b, "%dd", d/day)
		d %= day
		if d == 0 {
			return b.String()
		}
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	b.WriteString(s)
	return b.String()
}
